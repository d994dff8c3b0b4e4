import http from 'node:http';
import https from 'node:https';
import { systemClock, type Clock } from '../clock.js';
import { BackendError, CancelledError, TaskError } from '../errors.js';
import type { BackendSpec, GenerateRequest, LogprobSemantics } from './llm-client.js';
import { protocols, type ParsedGeneration, type ProtocolAdapter } from './protocols/index.js';

/** The timer half of the runtime's {@link Clock}, injectable so tests drive time. */
export type Timers = Pick<Clock, 'setTimeout' | 'clearTimeout'>;

/** The system clock's timers. */
export const realTimers: Timers = systemClock;

/** Why a call failed, as the pool needs to know it: retry elsewhere or not. */
export type FailureKind = 'unreachable' | 'http-5xx' | 'timeout' | 'malformed' | 'removed' | 'degraded';

/** The timeouts of one call; 0 disables each. */
export interface CallTimeouts {
  /** The whole call. */
  callMs: number;
  /** From sending the request to the first byte of the answer (its status line). */
  firstByteMs?: number | undefined;
  /** Longest silence between two chunks of the answer once it has started. */
  stallMs?: number | undefined;
}

/** Why the pool aborts a backend's in-flight calls (the `abort` signal's reason). */
export type EvictionReason = 'removed' | 'degraded';

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
  /** What this backend's logprobs mean: the spec's word, else the protocol's default. */
  readonly logprobSemantics: LogprobSemantics;
  private readonly agent: http.Agent;
  private readonly transport: typeof http.request;
  private discoveredModel: string | undefined;
  /** Optional body fields this server refused once (see `ProtocolAdapter.optionalFields`); never sent again. */
  private readonly dropped = new Set<string>();

  constructor(spec: BackendSpec & { id: string }, private readonly timers: Timers = realTimers) {
    this.id = spec.id;
    this.url = new URL(spec.url);
    this.protocol = protocols[spec.protocol];
    this.model = spec.model;
    this.logprobSemantics = spec.logprobSemantics ?? this.protocol.logprobSemantics;
    // One socket per concurrent call, kept open between turns; no cap (the pool bounds load).
    const secure = this.url.protocol === 'https:';
    this.agent = secure
      ? new https.Agent({ keepAlive: true, maxSockets: Infinity, keepAliveMsecs: 10_000 })
      : new http.Agent({ keepAlive: true, maxSockets: Infinity, keepAliveMsecs: 10_000 });
    this.transport = secure ? https.request : http.request;
  }

  /** Body fields left out for this server (it refused them once). */
  get droppedFields(): ReadonlySet<string> {
    return this.dropped;
  }

  /**
   * Sends one generation. `abort` is an extra signal the pool fires when it removes the backend
   * (a `removed` BackendError, retried elsewhere); `req.signal` is the rollout's (CancelledError).
   */
  async generate(req: GenerateRequest, timeouts: number | CallTimeouts, abort?: AbortSignal): Promise<ParsedGeneration> {
    const t: CallTimeouts = typeof timeouts === 'number' ? { callMs: timeouts } : timeouts;
    const headers: Record<string, string> = { 'x-rollout-turn': String(req.turn), 'x-rollout-id': req.rolloutId };
    // Percent-encoded: instance data is the client's, and a newline or non-ASCII byte in a header breaks the request (#9.9).
    if (req.instance.instance_id !== undefined) headers['x-rollout-instance-id'] = encodeURIComponent(String(req.instance.instance_id));
    if (this.protocol.name === 'openai' && !req.chat) {
      throw new TaskError(`backend ${this.id} speaks OpenAI chat completions, which needs the conversation; this caller sent prompt ids only`, { code: 'BACKEND_REJECTED', stage: 'run', details: { backendId: this.id } });
    }
    const model = this.model ?? (this.protocol.modelsPath !== undefined ? await this.servedModel(t.callMs, req.signal, abort) : undefined);
    const payload = this.protocol.body(req, model);
    for (const f of this.dropped) deletePath(payload, f);
    let { status, body } = await this.request('POST', this.protocol.generatePath, JSON.stringify(payload), headers, t, req.signal, abort);
    if (status >= 400 && status < 500) {
      // An older server that refuses an optional field (SGLang's sampling_seed, vLLM's
      // return_token_ids elsewhere): once more without it, and never again on this backend.
      const refused = (this.protocol.optionalFields ?? []).filter((f) => hasPath(payload, f) && body.includes(f.slice(f.lastIndexOf('.') + 1)));
      if (refused.length > 0) {
        for (const f of refused) {
          this.dropped.add(f);
          deletePath(payload, f);
        }
        ({ status, body } = await this.request('POST', this.protocol.generatePath, JSON.stringify(payload), headers, t, req.signal, abort));
      }
    }
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
      const parsed = this.protocol.parse(json, req);
      parsed.logprobSemantics ??= this.logprobSemantics;
      // A spec that states the server's mode wins over the protocol's guess, unless the answer had no logprobs.
      if (this.logprobSemantics !== this.protocol.logprobSemantics && parsed.logprobSemantics !== 'none') parsed.logprobSemantics = this.logprobSemantics;
      return parsed;
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
      const { status } = await this.request('GET', this.protocol.healthPath, undefined, {}, { callMs: timeoutMs });
      return status >= 200 && status < 500;
    } catch {
      return false;
    }
  }

  /**
   * vLLM refuses a completion for a model name it does not serve: without a configured name,
   * ask the models route (`GET /v1/models`) once and use the first one.
   */
  private async servedModel(timeoutMs: number, signal: AbortSignal, abort?: AbortSignal): Promise<string> {
    if (this.discoveredModel !== undefined) return this.discoveredModel;
    const { status, body } = await this.request('GET', this.protocol.modelsPath ?? '/v1/models', undefined, {}, { callMs: timeoutMs }, signal, abort);
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

  private request(method: string, path: string, body: string | undefined, headers: Record<string, string>, t: CallTimeouts, signal?: AbortSignal, abort?: AbortSignal): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(new CancelledError('LLM call cancelled'));
      if (abort?.aborted) return reject(this.evicted(abort));
      let settled = false;
      let firstByte: unknown;
      let stall: unknown;
      const finish = (err: Error | null, value?: { status: number; body: string }): void => {
        if (settled) return;
        settled = true;
        if (timer !== undefined) this.timers.clearTimeout(timer);
        if (firstByte !== undefined) this.timers.clearTimeout(firstByte);
        if (stall !== undefined) this.timers.clearTimeout(stall);
        signal?.removeEventListener('abort', onCancel);
        abort?.removeEventListener('abort', onRemove);
        if (err) {
          req.destroy();
          reject(err);
        } else resolve(value!);
      };
      const onCancel = (): void => finish(new CancelledError('LLM call cancelled'));
      const onRemove = (): void => finish(this.evicted(abort!));
      const stallMs = t.stallMs ?? 0;
      const armStall = (): void => {
        if (!(stallMs > 0 && Number.isFinite(stallMs))) return;
        if (stall !== undefined) this.timers.clearTimeout(stall);
        stall = this.timers.setTimeout(() => finish(this.fail('timeout', `backend ${this.id} went silent for ${stallMs} ms in the middle of its answer`, { timeoutMs: stallMs, timeout: 'stall' })), stallMs);
      };
      const opts: http.RequestOptions = {
        method,
        host: this.url.hostname,
        port: this.url.port,
        path: this.url.pathname.replace(/\/$/, '') + path,
        agent: this.agent,
        headers: body === undefined ? headers : { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      };
      const req = this.transport(opts, (res) => {
        if (firstByte !== undefined) this.timers.clearTimeout(firstByte);
        firstByte = undefined;
        armStall();
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => {
          chunks.push(c);
          armStall();
        });
        res.on('end', () => finish(null, { status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', (e) => finish(this.fail('unreachable', `backend ${this.id}: ${e.message}`, {}, e)));
      });
      req.on('error', (e) => finish(this.fail('unreachable', `backend ${this.id}: ${e.message}`, { errno: (e as NodeJS.ErrnoException).code }, e)));
      const timeoutMs = t.callMs;
      const timer = timeoutMs > 0 && Number.isFinite(timeoutMs)
        ? this.timers.setTimeout(() => finish(this.fail('timeout', `backend ${this.id} did not answer within ${timeoutMs} ms`, { timeoutMs, timeout: 'call' })), timeoutMs)
        : undefined;
      const fb = t.firstByteMs ?? 0;
      if (fb > 0 && Number.isFinite(fb)) {
        firstByte = this.timers.setTimeout(() => finish(this.fail('timeout', `backend ${this.id} sent no first byte within ${fb} ms`, { timeoutMs: fb, timeout: 'first-byte' })), fb);
      }
      signal?.addEventListener('abort', onCancel, { once: true });
      abort?.addEventListener('abort', onRemove, { once: true });
      req.end(body);
    });
  }

  private evicted(abort: AbortSignal): BackendError {
    const why: EvictionReason = abort.reason === 'degraded' ? 'degraded' : 'removed';
    return this.fail(why, why === 'degraded' ? `backend ${this.id} was marked degraded while the call was in flight` : `backend ${this.id} was removed`);
  }
}

/** Whether `obj` has the dotted path `p`. */
function hasPath(obj: Record<string, unknown>, p: string): boolean {
  const parts = p.split('.');
  let o: unknown = obj;
  for (const k of parts) {
    if (!o || typeof o !== 'object' || !(k in (o as object))) return false;
    o = (o as Record<string, unknown>)[k];
  }
  return true;
}

/** Deletes the dotted path `p` from `obj` when present. */
function deletePath(obj: Record<string, unknown>, p: string): void {
  const parts = p.split('.');
  let o: unknown = obj;
  for (let i = 0; i < parts.length - 1; i++) {
    if (!o || typeof o !== 'object') return;
    o = (o as Record<string, unknown>)[parts[i]!];
  }
  if (o && typeof o === 'object') delete (o as Record<string, unknown>)[parts.at(-1)!];
}
