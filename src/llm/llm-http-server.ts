import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { chatCompletion, OpenAiChatRequestSchema, renderChatPrompt, type OpenAiChatRequest, type OpenAiRouteOptions } from './openai-chat-route.js';
import { guardConnections, type ConnectionGuard } from '../connection-guard.js';

/** The protocols a server can answer. */
type ServedProtocol = 'prorl' | 'vllm' | 'sglang' | 'openai';

/** A generation request as every protocol carries it, after the wire format is read. */
export interface EngineRequest {
  protocol: ServedProtocol;
  promptIds: number[];
  maxTokens: number;
  temperature: number;
  topP: number;
  topK: number;
  seed: number | null;
  /** OpenAI `logit_bias`: added to the logit of each token id (OpenAI chat completions only). */
  logitBias?: Readonly<Record<number, number>> | undefined;
  /** `x-rollout-instance-id`, when the caller sent it. */
  instanceId: string | null;
  /** `x-rollout-turn`, when the caller sent it. */
  turn: number | null;
  /** Aborts when the client goes away. */
  signal: AbortSignal;
  /** Aborts on `POST /abort_request` (SGLang's): the engine answers what it has sampled so far, finish reason `abort`. */
  engineAbort?: AbortSignal | undefined;
}

/** What an engine answers. */
export interface EngineResult {
  outputIds: number[];
  logprobs: number[];
  finishReason: 'stop' | 'length' | 'abort';
}

/** Something that samples: the fake policies, or node-llama-cpp. */
export interface Engine {
  generate(req: EngineRequest): Promise<EngineResult>;
  /** Text of ids, for the `text` fields of vLLM / SGLang answers. */
  decode?(ids: number[]): string;
  /** Ids of text (special tokens parsed, no BOS), for `POST /tokenize` (vLLM's route): a client checks its tokenizer against the engine's. */
  tokenize?(text: string): number[];
}

/** An engine error that becomes an HTTP status (a 4xx the client caused, or a 5xx). */
export class EngineHttpError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

/** Options of {@link startLlmHttpServer}. */
export interface LlmHttpServerOptions {
  engine: Engine;
  host?: string | undefined;
  /** 0 (default) picks a free port. */
  port?: number | undefined;
  /**
   * Which protocols to answer; `all` (default) serves every one it can (ProRL and SGLang share
   * `/generate` and are told apart by body; OpenAI chat completions need `openai`).
   */
  protocol?: ServedProtocol | 'all' | undefined;
  /** Serves OpenAI `POST /v1/chat/completions` through this codec (the engine stays token-in/token-out). */
  openai?: OpenAiRouteOptions | undefined;
  weightVersion?: string | number | null | undefined;
  /** The engine's context window, listed as `max_model_len` at `GET /v1/models` as vLLM does. */
  maxModelLen?: number | undefined;
  modelName?: string | undefined;
  /** A connection with no request in progress is closed after this long. Default 65,000 ms. */
  connectionIdleMs?: number | undefined;
  /** HTTP connections held at once; at the cap a new one closes the one idle longest. Default 4,096. */
  maxConnections?: number | undefined;
  /** Extra GET routes (e.g. `/debug/samples`), answered as JSON. */
  getRoutes?: Record<string, () => unknown> | undefined;
  /** Called before each generation is handed to the engine; may answer instead (failure injection). */
  intercept?: ((n: number, res: http.ServerResponse) => 'pass' | 'handled') | undefined;
}

/** A running server. */
export interface LlmHttpServer {
  readonly url: string;
  readonly port: number;
  /** Generation requests received so far. */
  readonly requests: number;
  /** The HTTP connections held, and how many were timed out, evicted or refused. */
  readonly connections: ConnectionGuard;
  weightVersion: string | number | null;
  /** Stops listening and destroys every connection (keep-alive ones included). */
  close(): Promise<void>;
}

/**
 * An HTTP inference server speaking the ProRL `/generate`, vLLM `/v1/completions` and SGLang
 * native `/generate` token protocols over one {@link Engine}, and OpenAI `/v1/chat/completions`
 * when `openai` gives it a codec (messages rendered into prompt ids, sampled ids parsed back into
 * content and tool calls; vLLM's `return_token_ids` answered unless `returnTokenIds: false`),
 * with the health routes of each (`GET /health`, `/health_generate`, `/v1/models`) and
 * `GET /weight_version` / `POST /update_weight_version {weight_version}`. Used by
 * `rollout fake-llm` and `rollout llm-serve`. Resolves once listening.
 * @throws Error when `protocol` is `openai` without `openai` options.
 */
export async function startLlmHttpServer(opts: LlmHttpServerOptions): Promise<LlmHttpServer> {
  const protocol = opts.protocol ?? 'all';
  if (protocol === 'openai' && !opts.openai) throw new Error('the openai protocol needs a codec (options.openai.codec)');
  const serves = (p: ServedProtocol) => (protocol === 'all' || protocol === p) && (p !== 'openai' || opts.openai !== undefined);
  let requests = 0;
  const state = { weightVersion: opts.weightVersion ?? null };
  /** Token-protocol generations in flight, for `/abort_request`. */
  const aborts = new Set<AbortController>();
  const modelName = opts.modelName ?? 'default';

  const server = http.createServer((req, res) => {
    const url = req.url ?? '/';
    if (req.method === 'GET') {
      const path = url.split('?')[0]!;
      if (path === '/health' || path === '/health_generate') return json(res, 200, { status: 'ok' });
      // vLLM and SGLang list the context window as `max_model_len`; pre-flights read it there.
      if (path === '/v1/models') return json(res, 200, { object: 'list', data: [{ id: modelName, object: 'model', ...(opts.maxModelLen ? { max_model_len: opts.maxModelLen } : {}) }] });
      if (path === '/weight_version' || path === '/get_weight_version') return json(res, 200, { weight_version: state.weightVersion });
      const extra = opts.getRoutes?.[path];
      if (extra) return json(res, 200, extra());
      return json(res, 404, { error: `no route GET ${path}` });
    }
    if (req.method !== 'POST') return json(res, 405, { error: 'method not allowed' });
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      let body: Record<string, unknown>;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
      } catch {
        return json(res, 400, { error: 'body is not JSON' });
      }
      if (url === '/tokenize' && opts.engine.tokenize && typeof body.prompt === 'string') {
        const tokens = opts.engine.tokenize(body.prompt);
        return json(res, 200, { tokens, count: tokens.length });
      }
      if (url === '/abort_request') {
        // As SGLang's: every generation in flight ends now with what it has (we abort all; `rid` is not tracked).
        const n = aborts.size;
        for (const a of aborts) a.abort();
        aborts.clear();
        return json(res, 200, { aborted: n });
      }
      if (url === '/update_weight_version') {
        state.weightVersion = (body.weight_version as string | number | undefined) ?? null;
        return json(res, 200, { weight_version: state.weightVersion });
      }
      let p: ServedProtocol;
      if (url === '/v1/chat/completions' && serves('openai')) p = 'openai';
      else if (url === '/v1/completions' && serves('vllm')) p = 'vllm';
      else if (url === '/generate' && Array.isArray(body.prompt_ids) && serves('prorl')) p = 'prorl';
      else if (url === '/generate' && Array.isArray(body.input_ids) && serves('sglang')) p = 'sglang';
      else return json(res, url === '/generate' || url === '/v1/completions' ? 400 : 404, { error: `no ${protocol} route for POST ${url} with this body` });
      // As vLLM does: a completion for a model it does not serve is a 404.
      if ((p === 'vllm' || p === 'openai') && typeof body.model === 'string' && body.model !== modelName) return json(res, 404, { object: 'error', message: `The model \`${body.model}\` does not exist.` });
      const n = ++requests;
      if (opts.intercept?.(n, res) === 'handled') return;
      // Neither rejects: each answers its own failure as an HTTP error.
      if (p === 'openai') void handleChat(body, req, res, n);
      else void handle(p, body, req, res);
    });
  });

  /** OpenAI chat completions over the token engine: render, sample, parse back. */
  async function handleChat(raw: Record<string, unknown>, req: http.IncomingMessage, res: http.ServerResponse, n: number): Promise<void> {
    const o = opts.openai!;
    const returnTokenIds = o.returnTokenIds ?? true;
    // A stock OpenAI endpoint refuses arguments it does not know; vLLM's token-id extension is one.
    if (!returnTokenIds && 'return_token_ids' in raw) return json(res, 400, { error: { message: 'Unrecognized request argument supplied: return_token_ids', type: 'invalid_request_error', param: 'return_token_ids' } });
    const parsed = OpenAiChatRequestSchema.safeParse(raw);
    if (!parsed.success) {
      const i = parsed.error.issues[0]!;
      return json(res, 400, { object: 'error', message: `${i.path.join('.') || '(body)'}: ${i.message}`, type: 'BadRequestError' });
    }
    const body: OpenAiChatRequest = parsed.data;
    let promptIds: number[];
    try {
      promptIds = renderChatPrompt(o.codec, body);
    } catch (e) {
      return json(res, 400, { object: 'error', message: (e as Error).message, type: 'BadRequestError' });
    }
    const ac = abortOnHangUp(res);
    const turnHeader = headerOf(req, 'x-rollout-turn');
    let out: EngineResult;
    try {
      out = await opts.engine.generate({
        protocol: 'openai',
        promptIds,
        maxTokens: body.max_tokens ?? body.max_completion_tokens ?? 1024,
        temperature: body.temperature ?? 1,
        topP: body.top_p ?? 1,
        topK: body.top_k ?? -1,
        seed: body.seed ?? null,
        ...(body.logit_bias ? { logitBias: body.logit_bias } : {}),
        instanceId: headerOf(req, 'x-rollout-instance-id'),
        turn: turnHeader === null ? null : Number(turnHeader),
        signal: ac.signal,
      });
    } catch (e) {
      if (ac.signal.aborted) return;
      const status = e instanceof EngineHttpError ? e.status : 500;
      return json(res, status, { object: 'error', message: (e as Error).message });
    }
    if (ac.signal.aborted) return;
    json(res, 200, chatCompletion(o.codec, body, { promptIds, ...out }, { model: modelName, n, returnTokenIds }));
  }

  async function handle(p: 'prorl' | 'vllm' | 'sglang', body: Record<string, unknown>, req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const sp = (p === 'sglang' ? (body.sampling_params ?? {}) : body) as Record<string, unknown>;
    const promptIds = (p === 'prorl' ? body.prompt_ids : p === 'vllm' ? body.prompt : body.input_ids) as unknown;
    const maxTokens = Number(p === 'sglang' ? sp.max_new_tokens : sp.max_tokens);
    if (!Array.isArray(promptIds) || !promptIds.every((x) => Number.isInteger(x))) return json(res, 400, { error: 'prompt must be a list of token ids' });
    if (!Number.isInteger(maxTokens) || maxTokens < 1) return json(res, 400, { error: 'max_tokens must be a positive integer' });
    const ac = abortOnHangUp(res);
    const turnHeader = headerOf(req, 'x-rollout-turn');
    const num = (v: unknown, d: number): number => (typeof v === 'number' && Number.isFinite(v) ? v : d);
    const seedRaw = p === 'sglang' ? sp.sampling_seed : sp.seed;
    let out: EngineResult;
    // The version these tokens are sampled at: a trainer's update may land while an aborted
    // generation is still answering, and its partial tokens are the old version's.
    const version = state.weightVersion;
    const engineAbort = new AbortController();
    aborts.add(engineAbort);
    try {
      out = await opts.engine.generate({
        protocol: p,
        promptIds: promptIds as number[],
        maxTokens,
        temperature: num(sp.temperature, 1),
        topP: num(sp.top_p, 1),
        topK: num(sp.top_k, -1),
        seed: typeof seedRaw === 'number' ? seedRaw : null,
        instanceId: decodeInstanceId(headerOf(req, 'x-rollout-instance-id')),
        turn: turnHeader === null ? null : Number(turnHeader),
        signal: ac.signal,
        engineAbort: engineAbort.signal,
      });
    } catch (e) {
      if (ac.signal.aborted) return;
      const status = e instanceof EngineHttpError ? e.status : 500;
      return json(res, status, { error: (e as Error).message, object: 'error' });
    } finally {
      aborts.delete(engineAbort);
    }
    if (ac.signal.aborted) return;
    const text = p === 'prorl' ? '' : (opts.engine.decode?.(out.outputIds) ?? '');
    if (p === 'prorl') return json(res, 200, { response_ids: out.outputIds, logprobs: out.logprobs, finish_reason: out.finishReason, weight_version: version });
    if (p === 'vllm') {
      return json(res, 200, {
        id: `cmpl-${requests}`,
        object: 'text_completion',
        model: modelName,
        choices: [{ index: 0, text, token_ids: out.outputIds, logprobs: { tokens: out.outputIds.map((i) => `token_id:${i}`), token_logprobs: out.logprobs, top_logprobs: null, text_offset: [] }, finish_reason: out.finishReason }],
        usage: { prompt_tokens: (promptIds as number[]).length, completion_tokens: out.outputIds.length, total_tokens: (promptIds as number[]).length + out.outputIds.length },
      });
    }
    return json(res, 200, {
      text,
      output_ids: out.outputIds,
      meta_info: {
        finish_reason: { type: out.finishReason },
        prompt_tokens: (promptIds as number[]).length,
        completion_tokens: out.outputIds.length,
        output_token_logprobs: out.outputIds.map((id, i) => [out.logprobs[i], id, null]),
        weight_version: version,
      },
    });
  }

  server.keepAliveTimeout = 60_000;
  // Silent and idle connections closed and capped, so a flood cannot starve /health and the
  // generation routes (#28 §5.7). Idle longer than keepAliveTimeout: a client's pooled keep-alive
  // connection is closed by node's own timer first, as before.
  const connections = guardConnections(server, { idleMs: opts.connectionIdleMs ?? 65_000, maxConnections: opts.maxConnections ?? 4_096 });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, opts.host ?? '127.0.0.1', () => resolve());
  });
  const addr = server.address() as AddressInfo;
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  let closing: Promise<void> | undefined;
  return {
    url: `http://${host}:${addr.port}`,
    port: addr.port,
    get requests() {
      return requests;
    },
    connections,
    get weightVersion() {
      return state.weightVersion;
    },
    set weightVersion(v) {
      state.weightVersion = v;
    },
    close() {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closing;
    },
  };
}

function json(res: http.ServerResponse, status: number, body: unknown): void {
  if (res.headersSent || res.destroyed) return;
  const s = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(s) });
  res.end(s);
}

/** `x-rollout-instance-id` is percent-encoded by the runtime (instance ids may hold any text); a raw value passes as is. */
function decodeInstanceId(v: string | null): string | null {
  if (v === null) return null;
  try {
    return decodeURIComponent(v);
  } catch {
    return v;
  }
}

/** A request header's value when it is sent once (a string); null when absent or repeated. */
function headerOf(req: http.IncomingMessage, name: string): string | null {
  const v = req.headers[name];
  return typeof v === 'string' ? v : null;
}

/**
 * A controller aborted when the client hangs up before the answer is out. Not on every answered
 * request's close: an abort builds a DOMException with its stack.
 */
function abortOnHangUp(res: http.ServerResponse): AbortController {
  const ac = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) ac.abort();
  });
  return ac;
}
