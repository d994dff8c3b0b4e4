import { setMaxListeners } from 'node:events';
import { Heap } from 'heap-js';
import { createActor, fromCallback, type Actor } from 'xstate';
import { backendMachine, type BackendMachineEvent, type BackendStateName } from '../../machines/backend.machine.js';
import { systemClock } from '../clock.js';
import { BackendError, CancelledError, RolloutError, ValidationError } from '../errors.js';
import { parseBackendPoolOptions, type BackendPoolOptions, type BackendPoolOptionsInput } from './backend-pool-options.js';
import { HttpBackend, realTimers, type Timers } from './http-backend.js';
import type { BackendInfo, BackendSpec, GenerateRequest, GenerateResult, LogprobSemantics, ManagedLlmClient } from './llm-client.js';
import { PROTOCOL_NAMES } from './protocols/index.js';
import type { SharedBackendLoad } from './shared-backend-load.js';

/** Injected time, so tests drive probes and timeouts; and where warnings go. */
export interface BackendPoolDeps {
  timers?: Timers | undefined;
  now?: (() => number) | undefined;
  /** Receives the pool's warnings (once each); default `process.emitWarning`. */
  warn?: ((message: string) => void) | undefined;
  /** Other pools' load on the same backends (a cluster's workers); least-loaded picks add it. */
  sharedLoad?: SharedBackendLoad | undefined;
}

interface Slot {
  readonly id: string;
  readonly order: number;
  readonly spec: BackendSpec;
  readonly http: HttpBackend;
  actor: Actor<typeof backendMachine>;
  state: BackendStateName;
  inFlight: number;
  /** In-flight calls of other pools on this backend (from `sharedLoad`), as last known. */
  remote: number;
  /** Virtual load a newly admitted backend starts with, so it is not flooded; decays per completed call. */
  bias: number;
  /** Calls ever assigned (the reference's heap key). */
  assigned: number;
  /** Sequence number of the last pick (round-robin key). */
  lastPick: number;
  served: number;
  failures: number;
  weightVersion: string | number | null;
  latencyMs: number | null;
  inHeap: boolean;
  /**
   * Aborted (reason `removed` or `degraded`) when the backend is removed, or degraded while
   * another backend is healthy: its in-flight calls fail over. Replaced after a `degraded` abort.
   */
  eviction: AbortController;
  /** What its logprobs mean, once known (raw / processed); `unknown` until then. */
  semantics: LogprobSemantics;
}

/**
 * The backend pool: an {@link ManagedLlmClient} over many inference servers.
 *
 * Selection: a heap-js min-heap of the healthy backends keyed by requests in flight (plus a
 * decaying join bias), then registration order; O(log n) per pick, and the heap is re-keyed on
 * every acquire / release (backends are few, so heap-js's linear `remove` is fine). A request
 * whose `preferredBackendId` is healthy and within `stickySlack` of the minimum stays there.
 * A backend admitted (added, or re-admitted after an eviction) joins at the current minimum
 * load: its bias is the minimum key, and each of its completed calls takes one off.
 *
 * Each backend is one root XState actor of `backendMachine` (probing → healthy ⇄ degraded →
 * draining → removed); the pool provides its prober (GET of the protocol's health route on the
 * injected timers) and follows its state.
 *
 * `generate` retries a failed call (refused, reset, 5xx, timeout, malformed answer, backend
 * removed mid-call) on another backend with the same prompt ids, up to `retries` times, and
 * then throws `BackendError` (the runtime retries the rollout). It rethrows `TaskError` (a 4xx:
 * code `CONTEXT_FULL` or `BACKEND_REJECTED`) and `CancelledError` (the request's signal aborted;
 * the HTTP request is destroyed) at once.
 */
export class BackendPool implements ManagedLlmClient {
  readonly options: BackendPoolOptions;
  private readonly slots = new Map<string, Slot>();
  private readonly heap: Heap<Slot>;
  private readonly timers: Timers;
  private readonly now: () => number;
  private readonly warn: (message: string) => void;
  private order = 0;
  private pickSeq = 0;
  private closed = false;
  private warnedMixedSemantics = false;
  /** Whether any backend was added with a codecKey: only then does a pick filter by model. */
  private anyKeyed = false;
  private readonly shared: SharedBackendLoad | undefined;

  constructor(options: BackendPoolOptionsInput = {}, deps: BackendPoolDeps = {}) {
    this.options = parseBackendPoolOptions(options);
    this.timers = deps.timers ?? realTimers;
    this.now = deps.now ?? (() => systemClock.now());
    this.warn = deps.warn ?? ((m) => process.emitWarning(m, { code: 'ROLLOUT_BACKEND' }));
    this.shared = deps.sharedLoad;
    this.shared?.onRemoteChange(() => this.rekeyRemote());
    const key = this.options.policy === 'least-loaded' ? load : this.options.policy === 'cumulative-count' ? (s: Slot) => s.assigned : (s: Slot) => s.lastPick;
    this.heap = new Heap<Slot>((a, b) => key(a) - key(b) || a.order - b.order);
  }

  /**
   * Adds a backend; it is selectable once its first probe passes (at once when probes are off).
   * @throws ValidationError when the URL is not `http(s)://…`, the protocol is unknown, a live
   * backend already has this id, or the pool is closed.
   */
  addBackend(spec: BackendSpec): BackendInfo {
    if (this.closed) throw new ValidationError('the backend pool is closed');
    let url: URL;
    try {
      url = new URL(spec.url);
    } catch {
      throw new ValidationError(`not a backend URL: ${spec.url}`, [{ path: 'url', message: 'expected http://host:port' }]);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new ValidationError(`only http and https backends are supported: ${spec.url}`, [{ path: 'url', message: 'expected http:// or https://' }]);
    if (!PROTOCOL_NAMES.includes(spec.protocol)) throw new ValidationError(`unknown backend protocol ${String(spec.protocol)}`, [{ path: 'protocol', message: `expected ${PROTOCOL_NAMES.join(', ')}` }]);
    // Two paths on one host:port are two backends (`h:p/v1` and `h:p/other/v1`).
    const id = spec.id ?? `${url.host}${url.pathname.replace(/\/+$/, '')}`;
    if (this.slots.has(id)) throw new ValidationError(`backend ${id} is already in the pool`, [{ path: 'id', message: 'duplicate backend id' }]);
    if (spec.codecKey !== undefined) this.anyKeyed = true;
    const slot: Slot = {
      id,
      order: this.order++,
      spec,
      http: new HttpBackend({ ...spec, id }, this.timers),
      actor: undefined as never,
      state: 'probing',
      inFlight: 0,
      remote: this.shared?.remote(id) ?? 0,
      bias: 0,
      assigned: 0,
      lastPick: 0,
      served: 0,
      failures: 0,
      weightVersion: spec.weightVersion ?? null,
      latencyMs: null,
      inHeap: false,
      eviction: evictionController(),
      semantics: 'unknown',
    };
    this.slots.set(id, slot);
    slot.actor = createActor(
      backendMachine.provide({
        actors: { prober: this.prober(slot) },
        actions: { stateEntered: (_, p) => this.onState(slot, p.state) },
      }),
      { input: { backendId: id, failureThreshold: this.options.failureThreshold } },
    );
    slot.actor.start();
    this.noteSemantics(slot, slot.http.logprobSemantics);
    return this.info(slot);
  }

  drainBackend(id: string): boolean {
    const slot = this.slots.get(id);
    if (!slot || slot.state === 'draining' || slot.state === 'removed') return false;
    slot.actor.send({ type: 'DRAIN' });
    if (slot.inFlight === 0) slot.actor.send({ type: 'IDLE' });
    return true;
  }

  removeBackend(id: string): boolean {
    const slot = this.slots.get(id);
    if (!slot) return false;
    slot.actor.send({ type: 'REMOVE' });
    return true;
  }

  listBackends(): BackendInfo[] {
    return [...this.slots.values()].map((s) => this.info(s));
  }

  setWeightVersion(version: string | number, backendId?: string): void {
    for (const s of this.slots.values()) if (backendId === undefined || s.id === backendId) s.weightVersion = version;
  }

  async generate(req: GenerateRequest): Promise<GenerateResult> {
    const attempts: { backendId: string; error: string }[] = [];
    const tried = new Set<Slot>();
    for (let attempt = 0; attempt <= this.options.retries; attempt++) {
      if (req.signal.aborted) throw new CancelledError('LLM call cancelled');
      if (this.closed) break;
      const slot = this.pick(attempt === 0 ? req.preferredBackendId : undefined, tried, req.model);
      if (!slot) break;
      tried.add(slot);
      this.acquire(slot);
      // The version in force when the call is sent is the one that samples it: an update that
      // lands while the answer is on its way (a long turn, an abort answered after the new
      // version was set) must not re-stamp tokens the old weights produced (#28).
      const sentVersion = slot.weightVersion;
      const t0 = this.now();
      try {
        const r = await slot.http.generate(req, this.timeouts, slot.eviction.signal);
        const ms = this.now() - t0;
        slot.served++;
        slot.latencyMs = slot.latencyMs === null ? ms : slot.latencyMs + this.options.latencyAlpha * (ms - slot.latencyMs);
        // A healthy backend with no failure on its count has nothing to reset: the event (a
        // machine step on every call, the hot path) is sent only when it changes something.
        if (slot.state === 'probing' || (slot.state === 'healthy' && slot.actor.getSnapshot().context.consecutiveFailures > 0)) slot.actor.send({ type: 'CALL_OK' });
        const semantics = r.logprobSemantics ?? slot.http.logprobSemantics;
        this.noteSemantics(slot, semantics);
        const out: GenerateResult = {
          outputIds: r.outputIds,
          logprobs: r.logprobs,
          finishReason: r.finishReason,
          backendId: slot.id,
          weightVersion: r.weightVersion ?? sentVersion,
          tokenSource: r.tokenSource ?? 'engine',
          logprobSemantics: semantics,
        };
        if (r.enginePromptIds) out.enginePromptIds = r.enginePromptIds;
        return out;
      } catch (e) {
        if (!(e instanceof RolloutError) || !e.retryable) throw e;
        slot.failures++;
        attempts.push({ backendId: slot.id, error: e.message });
        // A call moved off a degraded backend is not one more failure of it.
        const kind = (e.details as { kind?: string } | undefined)?.kind;
        if (slot.state !== 'removed' && slot.state !== 'draining' && kind !== 'degraded') slot.actor.send({ type: 'CALL_FAIL' });
      } finally {
        this.release(slot);
      }
    }
    // Backends there are, but none of this rollout's model: say so, and how to add one.
    const otherModels = attempts.length === 0 && req.model !== undefined && [...this.slots.values()].some((s) => s.state !== 'removed' && s.spec.codecKey !== undefined && s.spec.codecKey !== req.model);
    const none = otherModels ? `no LLM backend serves this rollout's model (${req.model}): register one with that tokenizer` : 'no LLM backend is available';
    throw new BackendError(attempts.length === 0 ? none : `no LLM backend could serve the call after ${attempts.length} attempt(s): ${attempts.at(-1)!.error}`, {
      code: attempts.length === 0 ? 'NO_BACKEND' : 'BACKEND',
      stage: 'run',
      details: { attempts },
    });
  }

  /** Stops every backend actor and its probes, fails in-flight calls over to nothing, closes sockets. */
  async close(): Promise<void> {
    this.closed = true;
    for (const id of [...this.slots.keys()]) this.removeBackend(id);
  }

  private get timeouts(): { callMs: number; firstByteMs: number; stallMs: number } {
    return { callMs: this.options.callTimeoutMs, firstByteMs: this.options.firstByteTimeoutMs, stallMs: this.options.stallTimeoutMs };
  }

  /**
   * Records what a backend's logprobs mean; warns once when the live backends disagree (raw and
   * processed logprobs in one batch make importance ratios inconsistent across its turns).
   */
  private noteSemantics(slot: Slot, semantics: LogprobSemantics): void {
    if (semantics !== 'raw' && semantics !== 'processed') return;
    slot.semantics = semantics;
    if (this.warnedMixedSemantics) return;
    for (const other of this.slots.values()) {
      if (other !== slot && other.state !== 'removed' && (other.semantics === 'raw' || other.semantics === 'processed') && other.semantics !== semantics) {
        this.warnedMixedSemantics = true;
        this.warn(`LLM backends disagree on logprob semantics: ${other.id} gives ${other.semantics} logprobs, ${slot.id} gives ${semantics}; each turn records its own (AssistantTurn.logprobSemantics)`);
        return;
      }
    }
  }

  private pick(preferredId: string | undefined, tried: Set<Slot>, model?: string): Slot | undefined {
    // A backend serving another tokenizer never takes the call (a pool shared by runtimes of different models).
    const serves = (s: Slot): boolean => model === undefined || s.spec.codecKey === undefined || s.spec.codecKey === model;
    if (model !== undefined && this.anyKeyed) tried = new Set([...tried, ...[...this.slots.values()].filter((s) => !serves(s))]);
    const top = this.heap.peek();
    // Stickiness is a least-loaded refinement; the comparison policies behave like the reference.
    if (preferredId !== undefined && top && this.options.policy === 'least-loaded') {
      const p = this.slots.get(preferredId);
      if (p && p.inHeap && !tried.has(p) && load(p) <= load(top) + this.options.stickySlack) return p;
    }
    if (top && !tried.has(top)) return top;
    // A retry: the least loaded healthy backend not tried yet, else any healthy one, else one
    // still probing (its first call doubles as its probe).
    let best: Slot | undefined;
    // heap-js's iterator pops; walk a copy.
    for (const s of this.heap.toArray()) if (!tried.has(s) && (!best || this.heap.compare(s, best) < 0)) best = s;
    if (best) return best;
    if (top && serves(top)) return top;
    for (const s of this.slots.values()) if (s.state === 'probing' && !tried.has(s)) return s;
    return undefined;
  }

  private acquire(slot: Slot): void {
    if (slot.inHeap) this.heap.remove(slot);
    slot.inFlight++;
    slot.assigned++;
    slot.lastPick = ++this.pickSeq;
    if (slot.inHeap) this.heap.push(slot);
    this.shared?.setLocal(slot.id, slot.inFlight);
  }

  private release(slot: Slot): void {
    if (slot.inHeap) this.heap.remove(slot);
    slot.inFlight--;
    if (slot.bias > 0) slot.bias--;
    if (slot.inHeap) this.heap.push(slot);
    this.shared?.setLocal(slot.id, slot.inFlight);
    if (slot.state === 'draining' && slot.inFlight === 0) slot.actor.send({ type: 'IDLE' });
  }

  /** Other pools' loads changed: re-key the slots whose remote load moved (backends are few). */
  private rekeyRemote(): void {
    for (const slot of this.slots.values()) {
      const remote = this.shared!.remote(slot.id);
      if (remote === slot.remote) continue;
      if (slot.inHeap) this.heap.remove(slot);
      slot.remote = remote;
      if (slot.inHeap) this.heap.push(slot);
    }
  }

  private onState(slot: Slot, state: BackendStateName): void {
    slot.state = state;
    if (state === 'healthy') {
      if (!slot.inHeap) {
        const top = this.heap.peek();
        // Join at the current minimum of this pool's own load: no burst of every new request onto
        // the newcomer. (Other pools' load is not biased in: it is real, and it decays by itself.)
        slot.bias = top && this.options.policy === 'least-loaded' ? Math.max(0, top.inFlight + top.bias - slot.inFlight) : 0;
        if (top && this.options.policy === 'cumulative-count') slot.assigned = Math.max(slot.assigned, top.assigned);
        if (top && this.options.policy === 'round-robin') slot.lastPick = Math.max(slot.lastPick, top.lastPick);
        slot.inHeap = true;
        this.heap.push(slot);
      }
      return;
    }
    if (slot.inHeap) {
      this.heap.remove(slot);
      slot.inHeap = false;
    }
    // A frozen backend answers nothing until the call timeout: once it is evicted, its in-flight
    // calls are aborted and re-sent elsewhere (the token prefix is portable) — when there is an
    // elsewhere; with no healthy backend left they keep waiting on it.
    if (state === 'degraded' && slot.inFlight > 0 && this.heap.size() > 0) {
      const old = slot.eviction;
      slot.eviction = evictionController();
      old.abort('degraded');
    }
    if (state === 'removed') {
      slot.eviction.abort('removed');
      slot.http.close();
      this.slots.delete(slot.id);
      this.shared?.setLocal(slot.id, 0);
      // Stopping from inside the actor's own action would re-enter it: defer.
      queueMicrotask(() => slot.actor.stop());
    }
  }

  private prober(slot: Slot) {
    const { probeIntervalMs, probeTimeoutMs } = this.options;
    return fromCallback<BackendMachineEvent, { backendId: string; immediate: boolean }>(({ sendBack, input }) => {
      if (probeIntervalMs === 0) {
        if (input.immediate) sendBack({ type: 'PROBE_OK' });
        return () => {};
      }
      let stopped = false;
      let timer: unknown;
      const run = async (): Promise<void> => {
        const ok = await slot.http.probe(probeTimeoutMs);
        if (stopped) return;
        sendBack({ type: ok ? 'PROBE_OK' : 'PROBE_FAIL' });
        if (!stopped) timer = this.timers.setTimeout(() => void run(), probeIntervalMs);
      };
      // A new backend (or an evicted one) is probed at once; a healthy one after a period.
      if (input.immediate) void run();
      else timer = this.timers.setTimeout(() => void run(), probeIntervalMs);
      return () => {
        stopped = true;
        if (timer !== undefined) this.timers.clearTimeout(timer);
      };
    });
  }

  private info(s: Slot): BackendInfo {
    return {
      id: s.id,
      url: s.spec.url,
      protocol: s.spec.protocol,
      state: s.state,
      inFlight: s.inFlight,
      served: s.served,
      failures: s.failures,
      weightVersion: s.weightVersion,
      latencyMs: s.latencyMs,
      logprobSemantics: s.semantics,
    };
  }
}

function evictionController(): AbortController {
  const c = new AbortController();
  // Every in-flight call listens on it: no listener cap.
  setMaxListeners(0, c.signal);
  return c;
}

/** A slot's least-loaded key: its own calls, its join bias, and other pools' calls on it. */
function load(s: Slot): number {
  return s.inFlight + s.bias + s.remote;
}
