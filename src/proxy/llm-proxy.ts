import { timingSafeEqual } from 'node:crypto';
import { chmod, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Server as NetServer, Socket } from 'node:net';
import type { OpenAiChatRequest } from '../llm/openai-chat-route.js';
import type { Message, ToolSchema } from '../protocol/messages.js';
import { acceptLlmListeners } from '../sandbox/llm-listener-handoff.js';
import { createDialects, type Dialect, type DialectName, type DialectRoute, type InternalRequest } from './dialects/index.js';
import { routeFromBody, routeOf } from './dialects/detect.js';
import { jsonValueDepth } from './json-value-depth.js';
import { BodyNestingError, ResentBody } from './resent-body.js';
import { sendJson } from './dialects/dialect.js';
import { ProxyRefusal, sendRefusal } from './openai-error.js';

/** Options of {@link LlmProxy.listen}. */
export interface LlmProxyOptions {
  /** Host path of the Unix socket to listen on (its directory must exist; a stale file is replaced). */
  socketPath: string;
  /**
   * The rollout's key, accepted from `Authorization: Bearer`, `x-api-key` or `x-goog-api-key`
   * (or Google's `?key=`): a key never issued is 401, another rollout's key (live or ended) 403.
   */
  token: string;
  /** The model name `GET /v1/models` lists and answers carry. Default `rollout-policy`. */
  model?: string | undefined;
  /** Largest request body in bytes; larger is 413 without being buffered. Default 16 MiB. */
  maxBodyBytes?: number | undefined;
  /** Deepest JSON nesting accepted (400 beyond, before `JSON.parse`). Default 64. */
  maxDepth?: number | undefined;
  /**
   * Counts a conversation's prompt tokens for the token-count routes (Anthropic's
   * `/v1/messages/count_tokens`, Google's `:countTokens`): the rollout's codec, given by the
   * handler. Without it the count is an estimate (UTF-8 bytes / 4), said so in docs/proxy.md.
   */
  countTokens?: ((messages: Message[], tools: ToolSchema[]) => number) | undefined;
}

/** One chat request of the harness, handed to the rollout's loop by {@link LlmProxy.next}. */
export interface ProxyChatCall {
  /** 1-based number of the chat request on this proxy. */
  readonly seq: number;
  /** The API dialect the request came in (its answer goes out in the same). */
  readonly dialect: DialectName;
  /**
   * The request's sampling fields in chat-completions form: the request itself for `chat`; for
   * the other dialects its `messages` is empty (the conversation is {@link messages}).
   */
  readonly body: OpenAiChatRequest;
  /** Its conversation in the runtime's message form. */
  readonly messages: Message[];
  readonly tools: ToolSchema[];
  /** `stream: true`: the answer goes out as server-sent events. */
  readonly stream: boolean;
  /** The request's own output cap (`max_completion_tokens ?? max_tokens`, `max_output_tokens`, `maxOutputTokens`). */
  readonly maxTokens: number | undefined;
  /** The request's switch of the template's thinking (chat_template_kwargs, Anthropic `thinking`, Google `thinkingConfig`); undefined: not said. */
  readonly enableThinking: boolean | undefined;
  /** True once the harness hung up (an answer is then dropped). */
  readonly closed: boolean;
  /**
   * Sends a finished `chat.completion` — the one internal answer — in the request's dialect (as
   * JSON, or as that dialect's stream), with the model name the request asked for. Later calls are no-ops.
   */
  answer(completion: Record<string, unknown>): void;
  /** Sends the refusal in the request's dialect's error shape. Later calls are no-ops. */
  refuse(refusal: ProxyRefusal): void;
}

const DEFAULT_MAX_BODY = 16 * 1024 * 1024;

/** The top-level field of each dialect's request that holds the conversation an agent re-sends. */
const HISTORY_KEY: Record<DialectName, string> = { chat: 'messages', responses: 'input', anthropic: 'messages', google: 'contents' };

/**
 * Chat requests of one rollout open at once (the one sampled and those waiting): CLIs send a
 * side request or a sub-agent's call beside the main one, rarely more than two or three; a
 * harness looping on parallel requests is told 409 rather than queueing without bound.
 */
export const MAX_OPEN_CALLS = 8;

/**
 * The per-rollout LLM endpoint: an HTTP server on a Unix socket serving `GET /v1/models` and four
 * API dialects, each JSON or streamed (src/proxy/dialects/): OpenAI chat completions
 * (`POST /v1/chat/completions`), OpenAI Responses (`POST /v1/responses`), Anthropic Messages
 * (`POST /v1/messages`, `/v1/messages/count_tokens`) and Google (`POST …/models/{model}:generateContent`,
 * `:streamGenerateContent`, `:countTokens`) — told apart by path, then the `anthropic-version`
 * header, then the body. It checks the rollout's key, reads each request into the one internal
 * chat form and hands it to the rollout's loop ({@link next}); it never talks to an engine itself
 * — rendering, sampling and the token record are the loop's (`src/runtime/harness-steps.ts`),
 * the same whatever the dialect. Policy, as docs/proxy.md explains:
 *
 * - one chat request sampled at a time: requests that arrive while one is unanswered (a CLI's
 *   sub-agent, or a side request for a title or a summary) wait in arrival order, at most
 *   {@link MAX_OPEN_CALLS} open at once, and are handed to the loop one by one — each is placed
 *   on the token record like any call (a conversation that extends none starts or resumes its
 *   own segment, docs/proxy.md). Beyond the bound a request is 409 (`request_in_flight`, with
 *   retry hints). A waiting request whose harness hangs up leaves the queue unsampled. Not every
 *   CLI retries a 409 (the Gemini CLI retries only 429 and 5xx), so waiting is the rule;
 * - after {@link end} every chat request is 410 (`rollout_ended`); after {@link close} the
 *   socket is gone;
 * - errors are in the request's dialect's shape: 400 malformed JSON / bad fields (naming the
 *   field) / a feature not served (images, server-side tools) / an unknown dialect (naming the
 *   known ones), 401 unknown key, 403 another rollout's key, 404 unknown path, 405 wrong method,
 *   413 body over `maxBodyBytes`.
 */
export class LlmProxy {
  private readonly sockets = new Set<Socket>();
  /** Chat requests read and not yet taken by the loop, in arrival order. */
  private readonly queue: ChatCall[] = [];
  /** The call taken by the loop and not yet answered. */
  private taken: ChatCall | null = null;
  /** Chat requests from arrival until refused, answered or dropped (being read, queued or taken): the 409 gate. */
  private open = 0;
  private waiter: { resolve: (c: ProxyChatCall) => void; reject: (e: unknown) => void; signal: AbortSignal; onAbort: () => void } | null = null;
  private ended: string | null = null;
  private closed = false;
  private seq = 0;
  /** The dialects' readers and writers (the chat one keeps the re-sent history's validation). */
  private readonly dialects = createDialects();
  /** Per dialect, the parse that skips the history re-sent unchanged (resent-body.ts). */
  private readonly bodies = new Map<DialectName, ResentBody>();
  private readonly warned = new Set<string>();
  /** Warnings about requests, each once per rollout (a Responses tool of a type not served, …). */
  readonly warnings: string[] = [];
  /** Listeners in sandboxes' network namespaces this proxy serves itself (llm-listener-handoff.ts). */
  private readonly listeners = new Set<NetServer>();
  private unregister: () => void = () => undefined;
  private readonly token: Buffer;
  readonly model: string;
  /** Requests seen, by answer status; connections that came by an adopted listener (for tests and diagnostics). */
  readonly stats = { requests: 0, byStatus: new Map<number, number>(), listenerConnections: 0 };

  private constructor(
    private readonly server: Server,
    private readonly opts: LlmProxyOptions,
  ) {
    this.token = Buffer.from(opts.token);
    this.model = opts.model ?? 'rollout-policy';
    issueKey(opts.token);
  }

  /** Starts a proxy listening on `opts.socketPath` (mode 0666: the sandbox's uid connects; the token is the gate). */
  static async listen(opts: LlmProxyOptions): Promise<LlmProxy> {
    await rm(opts.socketPath, { force: true });
    const server = createServer({ keepAliveTimeout: 60_000 });
    const proxy = new LlmProxy(server, opts);
    server.on('request', (req: IncomingMessage, res: ServerResponse) => proxy.route(req, res));
    server.on('connection', (s: Socket) => {
      proxy.sockets.add(s);
      // A harness that hangs up mid-answer (EPIPE, ECONNRESET) is its own business, never a crash.
      s.on('error', () => {});
      s.on('close', () => proxy.sockets.delete(s));
    });
    // A malformed request line or header: answer 400 and drop the connection, never throw.
    server.on('clientError', (_err, socket: Socket) => {
      if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
      else socket.destroy();
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(opts.socketPath, () => {
        server.off('error', reject);
        resolve();
      });
    });
    await chmod(opts.socketPath, 0o666);
    proxy.unregister = acceptLlmListeners(opts.socketPath, (l) => proxy.adopt(l));
    return proxy;
  }

  /** Listeners handed over by sandboxes (0 or 1; for tests and diagnostics). */
  get adoptedListeners(): number {
    return this.listeners.size;
  }

  /**
   * Serves a sandbox's in-namespace listener directly: its connections enter this proxy's HTTP
   * server as the Unix socket's do, with no forwarding process in between. A restarted shell's
   * new namespace replaces the old listener. Closed with the proxy.
   */
  private adopt(listener: NetServer): void {
    if (this.closed) {
      listener.close();
      return;
    }
    for (const old of this.listeners) old.close();
    this.listeners.clear();
    this.listeners.add(listener);
    // An accept error (EMFILE under load) must not crash the runtime: it costs that one
    // connection, which its client sees refused.
    listener.on('error', () => undefined);
    listener.on('connection', (s: Socket) => {
      // Nagle off, as on the host forwarder's side of the loopback: an answer goes out whole at once.
      s.setNoDelay(true);
      this.stats.listenerConnections++;
      this.server.emit('connection', s);
    });
  }

  /** The socket path. */
  get socketPath(): string {
    return this.opts.socketPath;
  }

  /** True after {@link end}. */
  get hasEnded(): boolean {
    return this.ended !== null;
  }

  /**
   * The next chat request: one already waiting, or the next to arrive. One waiter at a time.
   * Rejects with the signal's reason when `signal` aborts, and with an Error after {@link end}.
   */
  next(signal: AbortSignal): Promise<ProxyChatCall> {
    if (this.ended !== null) return Promise.reject(new Error(`the proxy has ended: ${this.ended}`));
    if (signal.aborted) return Promise.reject(signal.reason);
    if (this.waiter) return Promise.reject(new Error('LlmProxy.next: a waiter is already registered'));
    const q = this.queue.shift();
    if (q) {
      this.taken = q;
      q.handedOut = true;
      return Promise.resolve(q);
    }
    return new Promise<ProxyChatCall>((resolve, reject) => {
      const onAbort = (): void => {
        this.waiter = null;
        reject(signal.reason);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.waiter = { resolve, reject, signal, onAbort };
    });
  }

  /**
   * Withdraws the waiting {@link next} (it rejects): its caller no longer wants a request, e.g. the
   * harness exited first. A request arriving later waits for the next `next`. No-op without one.
   */
  withdraw(): void {
    const w = this.waiter;
    if (!w) return;
    this.waiter = null;
    w.signal.removeEventListener('abort', w.onAbort);
    w.reject(new Error('LlmProxy.next: withdrawn'));
  }

  /**
   * Ends the rollout's side: every later chat request is 410, an unanswered one is refused with
   * 410 too, and a waiting {@link next} rejects. Idempotent.
   */
  end(reason: string): void {
    if (this.ended !== null) return;
    this.ended = reason;
    const gone = new ProxyRefusal({ status: 410, type: 'invalid_request_error', code: 'rollout_ended', message: `this rollout has ended (${reason}); no more LLM calls are taken` });
    for (const c of this.queue.splice(0)) c.refuse(gone);
    this.taken?.refuse(gone);
    this.taken = null;
    const w = this.waiter;
    if (w) {
      this.waiter = null;
      w.signal.removeEventListener('abort', w.onAbort);
      w.reject(new Error(`the proxy has ended: ${reason}`));
    }
  }

  /** Ends, stops listening, drops every connection and removes the socket file. Idempotent. */
  async close(): Promise<void> {
    this.end('closed');
    if (this.closed) return;
    this.closed = true;
    retireKey(this.opts.token);
    this.unregister();
    for (const l of this.listeners) l.close();
    this.listeners.clear();
    const done = new Promise<void>((r) => this.server.close(() => r()));
    for (const s of this.sockets) s.destroy();
    await done;
    await rm(this.opts.socketPath, { force: true });
  }

  private route(req: IncomingMessage, res: ServerResponse): void {
    this.stats.requests++;
    res.on('finish', () => this.stats.byStatus.set(res.statusCode, (this.stats.byStatus.get(res.statusCode) ?? 0) + 1));
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = (q < 0 ? url : url.slice(0, q)).replace(/\/+$/, '');
    const query = q < 0 ? '' : url.slice(q + 1);
    const route = routeOf(path, query, req.headers);
    const shape = route ? this.dialects[route.dialect] : this.dialects.chat;
    const denied = this.denied(req, query);
    if (denied) {
      req.resume();
      return sendRefusal(res, denied, shape.errorBody(denied));
    }
    if (path === '/v1/models') {
      req.resume();
      if (req.method !== 'GET') return sendRefusal(res, methodNotAllowed(req.method, 'GET'));
      return sendJson(res, 200, { object: 'list', data: [{ id: this.model, object: 'model', created: 0, owned_by: 'rollout-runtime' }] });
    }
    if (req.method !== 'POST') {
      req.resume();
      if (!route) return sendRefusal(res, new ProxyRefusal({ status: 404, type: 'invalid_request_error', code: 'unknown_url', message: `unknown path ${JSON.stringify(path.slice(0, 200))}: this endpoint serves GET /v1/models and POST /v1/chat/completions, /v1/responses, /v1/messages, /v1beta/models/{model}:generateContent` }));
      const r = methodNotAllowed(req.method, 'POST');
      return sendRefusal(res, r, shape.errorBody(r));
    }
    // Never rejects: chat answers each failure as a refusal.
    void this.chat(req, res, route);
  }

  private async chat(req: IncomingMessage, res: ServerResponse, pathRoute: DialectRoute | null): Promise<void> {
    let route = pathRoute;
    const refuse = (r: ProxyRefusal): void => sendRefusal(res, r, this.dialects[route?.dialect ?? 'chat'].errorBody(r));
    const counting = route?.op === 'count_tokens';
    if (!counting && this.ended !== null) {
      req.resume();
      return refuse(new ProxyRefusal({ status: 410, type: 'invalid_request_error', code: 'rollout_ended', message: `this rollout has ended (${this.ended}); no more LLM calls are taken` }));
    }
    if (!counting && this.open >= MAX_OPEN_CALLS) {
      req.resume();
      return refuse(new ProxyRefusal({ status: 409, type: 'invalid_request_error', code: 'request_in_flight', message: `${MAX_OPEN_CALLS} chat requests of this rollout are already unanswered; they are sampled one at a time` }));
    }
    if (!counting) this.open++;
    let call: ChatCall;
    try {
      const json = this.parseJson(await this.readBody(req), route);
      route ??= routeFromBody(json);
      const dialect = this.dialects[route.dialect];
      const internal = dialect.read(json, route, { warn: (m) => this.warn(m) });
      if (route.op === 'count_tokens') {
        const n = this.opts.countTokens ? this.opts.countTokens(internal.messages, internal.tools) : estimateTokens(internal.messages, internal.tools);
        return sendJson(res, 200, dialect.countBody(n));
      }
      call = new ChatCall({ seq: ++this.seq, writer: dialect, req: internal, res, onSettled: () => this.settled(call) });
    } catch (err) {
      if (!counting) this.open--;
      return refuse(err instanceof ProxyRefusal ? err : new ProxyRefusal({ status: 400, type: 'invalid_request_error', code: 'bad_request', message: (err as Error).message }));
    }
    if (this.ended !== null) return call.refuse(new ProxyRefusal({ status: 410, type: 'invalid_request_error', code: 'rollout_ended', message: `this rollout has ended (${this.ended})` }));
    const w = this.waiter;
    if (w) {
      this.waiter = null;
      w.signal.removeEventListener('abort', w.onAbort);
      this.taken = call;
      call.handedOut = true;
      w.resolve(call);
    } else {
      this.queue.push(call);
    }
  }

  /**
   * The body parsed, then its nesting checked on the value (json-value-depth.ts): V8's
   * `JSON.parse` is iterative, so a deep body cannot overflow it; the depth limit guards the
   * recursive code after it. A chat request of a dialect known by its path skips the history
   * its previous one sent (resent-body.ts): the same value and the same errors, in O(new items).
   */
  private parseJson(raw: Buffer, route: DialectRoute | null): unknown {
    const maxDepth = this.opts.maxDepth ?? 64;
    let json: unknown;
    try {
      if (route?.op === 'generate') {
        let body = this.bodies.get(route.dialect);
        if (!body) this.bodies.set(route.dialect, (body = new ResentBody(HISTORY_KEY[route.dialect], maxDepth)));
        return body.parse(raw);
      }
      json = JSON.parse(raw.toString('utf8'));
    } catch (err) {
      if (err instanceof BodyNestingError) throw new ProxyRefusal({ status: 400, type: 'invalid_request_error', code: 'invalid_json', message: err.message });
      throw new ProxyRefusal({ status: 400, type: 'invalid_request_error', code: 'invalid_json', message: `malformed JSON: ${(err as Error).message.slice(0, 200)}` });
    }
    if (jsonValueDepth(json, maxDepth) > maxDepth) throw new ProxyRefusal({ status: 400, type: 'invalid_request_error', code: 'invalid_json', message: `JSON nested deeper than ${maxDepth}` });
    return json;
  }

  private warn(message: string): void {
    if (this.warned.has(message) || this.warned.size >= 32) return;
    this.warned.add(message);
    this.warnings.push(message);
  }

  /** A call was answered, refused, or dropped while it waited (its harness hung up): it leaves the gate and the queue. */
  private settled(call: ChatCall): void {
    this.open--;
    if (this.taken === call) this.taken = null;
    else {
      const i = this.queue.indexOf(call);
      if (i >= 0) this.queue.splice(i, 1);
    }
  }

  /** Null when the request carries this rollout's key; else the 401 (no key, or one never issued) or 403 (another rollout's). */
  private denied(req: IncomingMessage, query: string): ProxyRefusal | null {
    const keys = keysOf(req, query);
    for (const key of keys) {
      const given = Buffer.from(key);
      if (given.length === this.token.length && timingSafeEqual(given, this.token)) return null;
    }
    if (keys.some((k) => issuedKeys.has(k))) return new ProxyRefusal({ status: 403, type: 'invalid_request_error', code: 'wrong_rollout_key', message: "this key belongs to another rollout (live or ended), not to this sandbox's" });
    return new ProxyRefusal({ status: 401, type: 'invalid_request_error', code: 'invalid_api_key', message: 'missing or wrong API key: use the key this sandbox was given (OPENAI_API_KEY)' });
  }

  /** The body, bounded: 413 on a declared or streamed size over the limit, never buffered past it. */
  private readBody(req: IncomingMessage): Promise<Buffer> {
    const max = this.opts.maxBodyBytes ?? DEFAULT_MAX_BODY;
    const tooLarge = (): ProxyRefusal => new ProxyRefusal({ status: 413, type: 'invalid_request_error', code: 'request_too_large', message: `request body is over the limit of ${max} bytes` });
    const declared = Number(req.headers['content-length']);
    if (Number.isFinite(declared) && declared > max) {
      // Refused unread: the connection closes after the answer rather than draining 50 MB.
      req.resume();
      return Promise.reject(tooLarge());
    }
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      let done = false;
      req.on('data', (c: Buffer) => {
        if (done) return;
        size += c.length;
        if (size > max) {
          done = true;
          chunks.length = 0;
          reject(tooLarge());
          return;
        }
        chunks.push(c);
      });
      req.on('end', () => {
        if (done) return;
        done = true;
        resolve(Buffer.concat(chunks));
      });
      req.on('error', (err) => {
        if (done) return;
        done = true;
        reject(new ProxyRefusal({ status: 400, type: 'invalid_request_error', code: 'bad_body', message: `could not read the body: ${err.message}` }));
      });
    });
  }
}

/** What a {@link ChatCall} is made of. */
interface ChatCallOptions {
  /** The call's number in its rollout (1, 2, ...). */
  seq: number;
  /** The dialect the request came in, which writes the answer back in its shape. */
  writer: Dialect;
  req: InternalRequest;
  res: ServerResponse;
  /** Called once, when the call is answered or refused. */
  onSettled: () => void;
}

class ChatCall implements ProxyChatCall {
  private done = false;
  private hungUp = false;
  readonly dialect: DialectName;
  readonly body: OpenAiChatRequest;
  readonly messages: Message[];
  readonly tools: ToolSchema[];
  readonly stream: boolean;
  readonly maxTokens: number | undefined;
  readonly enableThinking: boolean | undefined;

  readonly seq: number;
  private readonly writer: Dialect;
  private readonly req: InternalRequest;
  private readonly res: ServerResponse;
  private readonly onSettled: () => void;

  constructor(o: ChatCallOptions) {
    const { writer, req, res } = o;
    this.seq = o.seq;
    this.writer = writer;
    this.req = req;
    this.res = res;
    this.onSettled = o.onSettled;
    this.dialect = writer.name;
    this.body = req.body;
    this.messages = req.messages;
    this.tools = req.tools;
    this.stream = req.stream;
    this.maxTokens = req.maxTokens;
    this.enableThinking = req.enableThinking;
    res.on('close', () => {
      if (res.writableFinished) return;
      this.hungUp = true;
      // Not taken yet: it leaves the queue unsampled (the proxy's `settled` removes it). A taken
      // one is still the loop's to finish; its answer is then dropped.
      if (!this.handedOut && !this.done) {
        this.done = true;
        this.onSettled();
      }
    });
  }

  /** Set by the proxy when it hands the call to the loop. */
  handedOut = false;

  get closed(): boolean {
    return this.hungUp;
  }

  answer(completion: Record<string, unknown>): void {
    if (this.done) return;
    this.done = true;
    this.onSettled();
    if (this.hungUp) return;
    this.writer.write(this.res, completion, this.req);
  }

  refuse(refusal: ProxyRefusal): void {
    if (this.done) return;
    this.done = true;
    this.onSettled();
    sendRefusal(this.res, refusal, this.writer.errorBody(refusal));
  }
}

/**
 * Keys of the proxies of this process, live and ended (the last {@link KEEP_KEYS}): a request
 * with one of them at another rollout's proxy is 403 rather than 401, so a misrouted harness is
 * told apart from one with no key at all.
 */
const issuedKeys = new Set<string>();
const KEEP_KEYS = 100_000;

function issueKey(key: string): void {
  issuedKeys.add(key);
  if (issuedKeys.size > KEEP_KEYS) issuedKeys.delete(issuedKeys.values().next().value!);
}

function retireKey(key: string): void {
  // Kept (as ended): a late request with it is still another rollout's key.
  issuedKeys.delete(key);
  issueKey(key);
}

/**
 * The keys a request presents: `Authorization: Bearer`, `x-api-key` (Anthropic), `x-goog-api-key`
 * and `?key=` (Google). Any of them may be ours: a CLI can send a key of its own configuration in
 * one header and the one it was given in another.
 */
function keysOf(req: IncomingMessage, query: string): string[] {
  const keys: string[] = [];
  const h = req.headers.authorization;
  if (typeof h === 'string' && h.startsWith('Bearer ')) keys.push(h.slice(7).trim());
  for (const name of ['x-api-key', 'x-goog-api-key']) {
    const x = req.headers[name];
    if (typeof x === 'string') keys.push(x.trim());
  }
  if (query.includes('key=')) {
    const k = new URLSearchParams(query).get('key');
    if (k) keys.push(k);
  }
  return keys;
}

/** A token count without the codec: UTF-8 bytes of the text / 4, the usual rule of thumb. */
function estimateTokens(messages: Message[], tools: ToolSchema[]): number {
  let bytes = Buffer.byteLength(JSON.stringify(tools));
  for (const m of messages) bytes += Buffer.byteLength(m.content) + (m.tool_calls ? Buffer.byteLength(JSON.stringify(m.tool_calls)) : 0) + 4;
  return Math.ceil(bytes / 4);
}

function methodNotAllowed(method: string | undefined, allowed: string): ProxyRefusal {
  return new ProxyRefusal({ status: 405, type: 'invalid_request_error', code: 'method_not_allowed', message: `${method ?? '?'} is not allowed here; use ${allowed}` });
}
