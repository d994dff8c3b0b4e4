import { timingSafeEqual } from 'node:crypto';
import { chmod, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Server as NetServer, Socket } from 'node:net';
import type { OpenAiChatRequest } from '../llm/openai-chat-route.js';
import type { Message, ToolSchema } from '../protocol/messages.js';
import { acceptLlmListeners } from '../sandbox/llm-listener-handoff.js';
import { jsonDepth } from '../json-depth.js';
import { ChatRequestReader } from './chat-request-reader.js';
import { ProxyRefusal, sendRefusal } from './openai-error.js';
import { writeCompletionStream } from './sse.js';

/** Options of {@link LlmProxy.listen}. */
export interface LlmProxyOptions {
  /** Host path of the Unix socket to listen on (its directory must exist; a stale file is replaced). */
  socketPath: string;
  /** The rollout's bearer token: a request without `Authorization: Bearer <token>` is 401. */
  token: string;
  /** The model name `GET /v1/models` lists and answers carry. Default `rollout-policy`. */
  model?: string | undefined;
  /** Largest request body in bytes; larger is 413 without being buffered. Default 16 MiB. */
  maxBodyBytes?: number | undefined;
  /** Deepest JSON nesting accepted (400 beyond, before `JSON.parse`). Default 64. */
  maxDepth?: number | undefined;
}

/** One chat request of the harness, handed to the rollout's loop by {@link LlmProxy.next}. */
export interface ProxyChatCall {
  /** 1-based number of the chat request on this proxy. */
  readonly seq: number;
  /** The request as validated. */
  readonly body: OpenAiChatRequest;
  /** Its conversation in the runtime's message form. */
  readonly messages: Message[];
  readonly tools: ToolSchema[];
  /** `stream: true`: the answer goes out as server-sent events. */
  readonly stream: boolean;
  /** `max_completion_tokens ?? max_tokens` of the request. */
  readonly maxTokens: number | undefined;
  /** True once the harness hung up (an answer is then dropped). */
  readonly closed: boolean;
  /** Sends a finished `chat.completion` (as JSON, or as SSE chunks when streaming). Later calls are no-ops. */
  answer(completion: Record<string, unknown>): void;
  /** Sends an OpenAI-style error. Later calls are no-ops. */
  refuse(refusal: ProxyRefusal): void;
}

const DEFAULT_MAX_BODY = 16 * 1024 * 1024;

/**
 * The per-rollout OpenAI-compatible endpoint: an HTTP server on a Unix socket serving
 * `GET /v1/models` and `POST /v1/chat/completions` (JSON or `stream: true` SSE). It checks the
 * rollout's token, validates each request and hands it to the rollout's loop ({@link next}); it
 * never talks to an engine itself — rendering, sampling and the token record are the loop's
 * (`src/runtime/harness-steps.ts`). Policy, as docs/proxy.md explains:
 *
 * - one chat request at a time: a second one while the first is unanswered is 409
 *   (`request_in_flight`); a trajectory is a sequence, and queueing parallel calls would record
 *   them in an order the harness never chose;
 * - after {@link end} every chat request is 410 (`rollout_ended`); after {@link close} the
 *   socket is gone;
 * - errors are OpenAI-style bodies: 400 malformed JSON / bad fields (naming `param`), 401 bad
 *   token, 404 unknown path, 405 wrong method, 413 body over `maxBodyBytes`.
 */
export class LlmProxy {
  private readonly sockets = new Set<Socket>();
  private queued: ChatCall | null = null;
  /** The call taken by the loop and not yet answered. */
  private taken: ChatCall | null = null;
  /** True from a chat request's arrival until it is refused or answered: the 409 gate. */
  private busy = false;
  private waiter: { resolve: (c: ProxyChatCall) => void; reject: (e: unknown) => void; signal: AbortSignal; onAbort: () => void } | null = null;
  private ended: string | null = null;
  private closed = false;
  private seq = 0;
  /** Validates requests, reusing the re-sent history's validation (chat-request-reader.ts). */
  private readonly reader = new ChatRequestReader();
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
    const q = this.queued;
    if (q) {
      this.queued = null;
      this.taken = q;
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
   * Ends the rollout's side: every later chat request is 410, an unanswered one is refused with
   * 410 too, and a waiting {@link next} rejects. Idempotent.
   */
  end(reason: string): void {
    if (this.ended !== null) return;
    this.ended = reason;
    const gone = new ProxyRefusal(410, 'invalid_request_error', 'rollout_ended', `this rollout has ended (${reason}); no more LLM calls are taken`);
    this.queued?.refuse(gone);
    this.taken?.refuse(gone);
    this.queued = this.taken = null;
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
    const path = (req.url ?? '/').split('?')[0]!.replace(/\/+$/, '');
    if (!this.authorized(req)) {
      req.resume();
      return sendRefusal(res, new ProxyRefusal(401, 'invalid_request_error', 'invalid_api_key', 'missing or wrong API key: use the OPENAI_API_KEY this sandbox was given'));
    }
    if (path === '/v1/models') {
      req.resume();
      if (req.method !== 'GET') return sendRefusal(res, methodNotAllowed(req.method, 'GET'));
      return sendJson(res, 200, { object: 'list', data: [{ id: this.model, object: 'model', created: 0, owned_by: 'rollout-runtime' }] });
    }
    if (path === '/v1/chat/completions') {
      if (req.method !== 'POST') {
        req.resume();
        return sendRefusal(res, methodNotAllowed(req.method, 'POST'));
      }
      void this.chat(req, res);
      return;
    }
    req.resume();
    sendRefusal(res, new ProxyRefusal(404, 'invalid_request_error', 'unknown_url', `unknown path ${JSON.stringify(path.slice(0, 200))}: this endpoint serves /v1/models and /v1/chat/completions`));
  }

  private async chat(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (this.ended !== null) {
      req.resume();
      return sendRefusal(res, new ProxyRefusal(410, 'invalid_request_error', 'rollout_ended', `this rollout has ended (${this.ended}); no more LLM calls are taken`));
    }
    if (this.busy) {
      req.resume();
      return sendRefusal(res, new ProxyRefusal(409, 'invalid_request_error', 'request_in_flight', 'another chat request of this rollout is still unanswered; send one request at a time'));
    }
    this.busy = true;
    let call: ChatCall;
    try {
      call = this.parse(await this.readBody(req), res);
    } catch (err) {
      this.busy = false;
      const refusal = err instanceof ProxyRefusal ? err : new ProxyRefusal(400, 'invalid_request_error', 'bad_request', (err as Error).message);
      return sendRefusal(res, refusal);
    }
    if (this.ended !== null) return call.refuse(new ProxyRefusal(410, 'invalid_request_error', 'rollout_ended', `this rollout has ended (${this.ended})`));
    const w = this.waiter;
    if (w) {
      this.waiter = null;
      w.signal.removeEventListener('abort', w.onAbort);
      this.taken = call;
      w.resolve(call);
    } else {
      this.queued = call;
    }
  }

  private parse(raw: Buffer, res: ServerResponse): ChatCall {
    const text = raw.toString('utf8');
    const maxDepth = this.opts.maxDepth ?? 64;
    if (jsonDepth(text) > maxDepth) throw new ProxyRefusal(400, 'invalid_request_error', 'invalid_json', `JSON nested deeper than ${maxDepth}`);
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (err) {
      throw new ProxyRefusal(400, 'invalid_request_error', 'invalid_json', `malformed JSON: ${(err as Error).message.slice(0, 200)}`);
    }
    const raw2 = json as { stream?: unknown; n?: unknown };
    const { body, messages, tools } = this.reader.read(json);
    if (raw2.n !== undefined && raw2.n !== 1) throw new ProxyRefusal(400, 'invalid_request_error', 'unsupported_value', 'n: only one choice per request is sampled (n = 1)', 'n');
    const call: ChatCall = new ChatCall(++this.seq, body, messages, tools, raw2.stream === true, body.max_completion_tokens ?? body.max_tokens, res, () => this.settled(call));
    return call;
  }

  private settled(call: ChatCall): void {
    if (this.taken === call) this.taken = null;
    if (this.queued === call) this.queued = null;
    this.busy = false;
  }

  private authorized(req: IncomingMessage): boolean {
    const h = req.headers.authorization;
    if (typeof h !== 'string' || !h.startsWith('Bearer ')) return false;
    const given = Buffer.from(h.slice(7).trim());
    return given.length === this.token.length && timingSafeEqual(given, this.token);
  }

  /** The body, bounded: 413 on a declared or streamed size over the limit, never buffered past it. */
  private readBody(req: IncomingMessage): Promise<Buffer> {
    const max = this.opts.maxBodyBytes ?? DEFAULT_MAX_BODY;
    const tooLarge = (): ProxyRefusal => new ProxyRefusal(413, 'invalid_request_error', 'request_too_large', `request body is over the limit of ${max} bytes`);
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
        reject(new ProxyRefusal(400, 'invalid_request_error', 'bad_body', `could not read the body: ${err.message}`));
      });
    });
  }
}

class ChatCall implements ProxyChatCall {
  private done = false;
  private hungUp = false;

  constructor(
    readonly seq: number,
    readonly body: OpenAiChatRequest,
    readonly messages: Message[],
    readonly tools: ToolSchema[],
    readonly stream: boolean,
    readonly maxTokens: number | undefined,
    private readonly res: ServerResponse,
    private readonly onSettled: () => void,
  ) {
    res.on('close', () => {
      if (!res.writableFinished) this.hungUp = true;
    });
  }

  get closed(): boolean {
    return this.hungUp;
  }

  answer(completion: Record<string, unknown>): void {
    if (this.done) return;
    this.done = true;
    this.onSettled();
    if (this.hungUp) return;
    if (this.stream) writeCompletionStream(this.res, completion);
    else sendJson(this.res, 200, completion);
  }

  refuse(refusal: ProxyRefusal): void {
    if (this.done) return;
    this.done = true;
    this.onSettled();
    sendRefusal(this.res, refusal);
  }
}

function methodNotAllowed(method: string | undefined, allowed: string): ProxyRefusal {
  return new ProxyRefusal(405, 'invalid_request_error', 'method_not_allowed', `${method ?? '?'} is not allowed here; use ${allowed}`);
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
