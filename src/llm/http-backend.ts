import http from 'node:http';
import { BackendError, CancelledError, TaskError } from '../errors.js';
import type { BackendSpec, GenerateRequest } from './llm-client.js';
import { protocols, type ParsedGeneration, type ProtocolAdapter } from './protocols/index.js';

/** Timer functions, injectable so tests drive time. */
export interface Timers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/** The global timers. */
export const realTimers: Timers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
};

/** Why a call failed, as the pool needs to know it: retry elsewhere or not. */
export type FailureKind = 'unreachable' | 'http-5xx' | 'timeout' | 'malformed' | 'removed';

/**
 * One inference server reached over one keep-alive `http.Agent` (node:http: ~97 µs per round
 * trip here against ~520 µs for a bare `fetch`). Knows nothing about pools; throws the runtime's
 * error classes:
 * - `BackendError` (retryable) with `details.kind` = {@link FailureKind} for a refused or reset
 *   connection, a 5xx, a timeout, an answer that does not fit the protocol;
 * - `TaskError` for a 4xx (the request itself is wrong; retrying elsewhere gives the same): code
 *   `CONTEXT_FULL` when the server says the prompt is too long, else `BACKEND_REJECTED`;
 * - `CancelledError` when the caller's signal aborts (the request is destroyed).
 */
export class HttpBackend {
  readonly id: string;
  readonly url: URL;
  readonly protocol: ProtocolAdapter;
  readonly model: string | undefined;
  private readonly agent: http.Agent;
  private discoveredModel: string | undefined;

  constructor(spec: BackendSpec & { id: string }, private readonly timers: Timers = realTimers) {
    this.id = spec.id;
    this.url = new URL(spec.url);
    this.protocol = protocols[spec.protocol];
    this.model = spec.model;
    // One socket per concurrent call, kept open between turns; no cap (the pool bounds load).
    this.agent = new http.Agent({ keepAlive: true, maxSockets: Infinity, keepAliveMsecs: 10_000 });
  }

  /**
   * Sends one generation. `abort` is an extra signal the pool fires when it removes the backend
   * (a `removed` BackendError, retried elsewhere); `req.signal` is the rollout's (CancelledError).
   */
  async generate(req: GenerateRequest, timeoutMs: number, abort?: AbortSignal): Promise<ParsedGeneration> {
    const headers: Record<string, string> = { 'x-rollout-turn': String(req.turn), 'x-rollout-id': req.rolloutId };
    // Percent-encoded: instance data is the client's, and a newline or non-ASCII byte in a header breaks the request (#9.9).
    if (req.instance.instance_id !== undefined) headers['x-rollout-instance-id'] = encodeURIComponent(String(req.instance.instance_id));
    const model = this.model ?? (this.protocol.name === 'vllm' ? await this.servedModel(timeoutMs, req.signal, abort) : undefined);
    const { status, body } = await this.request('POST', this.protocol.generatePath, JSON.stringify(this.protocol.body(req, model)), headers, timeoutMs, req.signal, abort);
    if (status >= 400 && status < 500) {
      const contextFull = /context|too long|maximum.*length|max_model_len|exceeds/i.test(body);
      throw new TaskError(`backend ${this.id} refused the request (${status}): ${body.slice(0, 300)}`, {
        code: contextFull ? 'CONTEXT_FULL' : 'BACKEND_REJECTED',
        stage: 'run',
        details: { backendId: this.id, status },
      });
    }
    if (status >= 500 || status < 200 || status >= 300) throw this.fail('http-5xx', `backend ${this.id} answered ${status}: ${body.slice(0, 300)}`, { status });
    let json: unknown;
    try {
      json = JSON.parse(body);
      return this.protocol.parse(json, req);
    } catch (e) {
      throw this.fail('malformed', `backend ${this.id} sent an answer that does not fit the ${this.protocol.name} protocol: ${(e as Error).message.slice(0, 300)}`);
    }
  }

  /**
   * GETs the health route; resolves true when the server answers below 500, false on a 5xx, a
   * refused connection or a timeout (never throws). A 404 counts as up: a server without the
   * route (some ProRL-style backends) is still answering.
   */
  async probe(timeoutMs: number): Promise<boolean> {
    try {
      const { status } = await this.request('GET', this.protocol.healthPath, undefined, {}, timeoutMs);
      return status >= 200 && status < 500;
    } catch {
      return false;
    }
  }

  /**
   * vLLM refuses a completion for a model name it does not serve: without a configured name,
   * ask `GET /v1/models` once and use the first one.
   */
  private async servedModel(timeoutMs: number, signal: AbortSignal, abort?: AbortSignal): Promise<string> {
    if (this.discoveredModel !== undefined) return this.discoveredModel;
    const { status, body } = await this.request('GET', '/v1/models', undefined, {}, timeoutMs, signal, abort);
    let id: unknown;
    try {
      id = (JSON.parse(body) as { data?: { id?: unknown }[] }).data?.[0]?.id;
    } catch {
      id = undefined;
    }
    if (status >= 300 || typeof id !== 'string') throw this.fail(status >= 500 ? 'http-5xx' : 'malformed', `backend ${this.id}: GET /v1/models gave no model (status ${status}); set the model in the backend address (?model=NAME)`);
    this.discoveredModel = id;
    return id;
  }

  /** Closes the idle keep-alive sockets. */
  close(): void {
    this.agent.destroy();
  }

  private fail(kind: FailureKind, message: string, details: Record<string, unknown> = {}, cause?: unknown): BackendError {
    return new BackendError(message, { code: 'BACKEND', stage: 'run', details: { backendId: this.id, kind, ...details }, ...(cause ? { cause } : {}) });
  }

  private request(method: string, path: string, body: string | undefined, headers: Record<string, string>, timeoutMs: number, signal?: AbortSignal, abort?: AbortSignal): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(new CancelledError('LLM call cancelled'));
      if (abort?.aborted) return reject(this.fail('removed', `backend ${this.id} was removed`));
      let settled = false;
      const finish = (err: Error | null, value?: { status: number; body: string }): void => {
        if (settled) return;
        settled = true;
        if (timer !== undefined) this.timers.clearTimeout(timer);
        signal?.removeEventListener('abort', onCancel);
        abort?.removeEventListener('abort', onRemove);
        if (err) {
          req.destroy();
          reject(err);
        } else resolve(value!);
      };
      const onCancel = (): void => finish(new CancelledError('LLM call cancelled'));
      const onRemove = (): void => finish(this.fail('removed', `backend ${this.id} was removed`));
      const opts: http.RequestOptions = {
        method,
        host: this.url.hostname,
        port: this.url.port,
        path: this.url.pathname.replace(/\/$/, '') + path,
        agent: this.agent,
        headers: body === undefined ? headers : { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      };
      const req = http.request(opts, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => finish(null, { status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', (e) => finish(this.fail('unreachable', `backend ${this.id}: ${e.message}`, {}, e)));
      });
      req.on('error', (e) => finish(this.fail('unreachable', `backend ${this.id}: ${e.message}`, { errno: (e as NodeJS.ErrnoException).code }, e)));
      const timer = timeoutMs > 0 && Number.isFinite(timeoutMs)
        ? this.timers.setTimeout(() => finish(this.fail('timeout', `backend ${this.id} did not answer within ${timeoutMs} ms`, { timeoutMs })), timeoutMs)
        : undefined;
      signal?.addEventListener('abort', onCancel, { once: true });
      abort?.addEventListener('abort', onRemove, { once: true });
      req.end(body);
    });
  }
}
