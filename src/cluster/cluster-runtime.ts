import { randomUUID } from 'node:crypto';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { builtinHandlers } from '../handlers/builtin.js';
import { HandlerRegistry } from '../handlers/registry.js';
import type { AgentHandler } from '../proxy/agent-contract.js';
import { InfraError, QueueFullError, RuntimeClosedError, ValidationError } from '../errors.js';
import { InstanceSchema, SamplingParamsSchema, type Instance } from '../protocol/instance.js';
import type { RolloutResult } from '../protocol/trajectory.js';
import type { ClusterControl, ClusterJobData, ClusterNodeStatus } from '../protocol/cluster.js';
import type { EventsOptions, GroupHandle, RolloutHandle, RolloutSummary, RuntimeStatus, SubmitOptions } from '../runtime/runtime-api.js';
import type { ServiceRuntime } from '../server/service-runtime.js';
import { GatewayBackends } from './backend-registry.js';
import { ClusterKeys } from './cluster-keys.js';
import { parseClusterOptions, type ClusterOptions, type ClusterOptionsInput } from './cluster-options.js';
import { ClusterStore, finalState, type StoredEvent } from './cluster-store.js';
import { cancelledResult } from './cancelled-result.js';
import { EventFanout } from './event-fanout.js';
import { NodeStatusBoard } from './node-status.js';
import { redisConnection } from './redis-connection.js';
import { every, systemClock, type Clock } from '../clock.js';

/** What the gateway needs besides cluster options. */
export interface ClusterGatewayParts {
  /** Handlers beyond the built-in ones: only their names matter here (the workers run them). */
  handlers?: AgentHandler[] | undefined;
  builtinHandlers?: boolean | undefined;
  /** Finished rollouts this gateway keeps in memory for `get`/`list` (Redis keeps every result for its TTL). */
  retainResults?: number | undefined;
  /** The clock of timestamps and the heartbeat. Default the system clock. */
  clock?: Clock | undefined;
}

/** A handle whose submission is durable in Redis once `accepted` resolves. */
export interface ClusterRolloutHandle extends RolloutHandle {
  readonly accepted: Promise<void>;
}

interface Tracked {
  summary: RolloutSummary;
  /** Set while someone may await the result on this gateway. */
  waiter: { promise: Promise<RolloutResult>; resolve(r: RolloutResult): void; reject(e: unknown): void } | null;
}

/**
 * The gateway's runtime: the {@link ServiceRuntime} that `rollout serve --redis` gives the
 * unchanged HTTP service. A submit becomes a BullMQ job (job id = rollout id, so a resubmit of
 * an id is idempotent); results come back from Redis (the result key, signalled on the event
 * stream); events come from the cluster's stream with global seqs; cancels and backend changes
 * go to every worker over pub/sub. It runs no rollout itself, and closing it cancels nothing:
 * the rollouts belong to the cluster, not to this gateway.
 */
export class ClusterRuntime implements ServiceRuntime {
  readonly options: ClusterOptions;
  readonly keys: ClusterKeys;
  private readonly tracked = new Map<string, Tracked>();
  private finishedOrder: string[] = [];
  private readonly sources: readonly string[];
  private readonly backends: GatewayBackends;
  private readonly now: () => number;
  private readonly retainResults: number;
  private state: 'running' | 'closing' | 'closed' = 'running';
  private stopTicking: (() => void) | null = null;
  private readonly clock: Clock;
  private sweeping = false;

  private readonly redis: Redis;
  private readonly store: ClusterStore;
  private readonly queue: Queue;
  private readonly fanout: EventFanout;
  private readonly board: NodeStatusBoard;

  /** Made by {@link connect}, with the connections and collaborators it opened. */
  private constructor(options: ClusterOptions, parts: ClusterGatewayParts, conn: { redis: Redis; store: ClusterStore; queue: Queue; fanout: EventFanout; board: NodeStatusBoard }) {
    const { redis, store } = conn;
    this.redis = redis;
    this.store = store;
    this.queue = conn.queue;
    this.fanout = conn.fanout;
    this.board = conn.board;
    this.options = options;
    this.keys = store.keys;
    this.clock = parts.clock ?? systemClock;
    this.now = () => this.clock.now();
    this.retainResults = parts.retainResults ?? 10_000;
    const registry = new HandlerRegistry(parts.builtinHandlers === false ? [] : builtinHandlers);
    for (const h of parts.handlers ?? []) registry.register(h);
    this.sources = Object.freeze(registry.keys());
    this.backends = new GatewayBackends(redis, store.keys);
  }

  /**
   * Connects to Redis, loads the backend registry and starts tailing the event stream. Rejects
   * (with every connection closed) when Redis cannot be reached.
   */
  static async connect(input: ClusterOptionsInput, parts: ClusterGatewayParts = {}): Promise<ClusterRuntime> {
    const options = parseClusterOptions(input);
    const keys = new ClusterKeys(options.prefix);
    const redis = redisConnection(options.redis);
    const tail = redisConnection(options.redis);
    let queue: Queue | null = null;
    try {
      await Promise.all([redis.ping(), tail.ping()]);
      const store = new ClusterStore(redis, keys, options);
      queue = new Queue(keys.queue, { connection: redis, prefix: options.prefix });
      const fanout = new EventFanout(store, tail, undefined, parts.clock);
      const board = new NodeStatusBoard({ redis, keys, queue, opts: options, now: () => (parts.clock ?? systemClock).now() });
      const rt = new ClusterRuntime(options, parts, { redis, store, queue, fanout, board });
      await rt.backends.load();
      fanout.onEvent((e) => rt.onEvent(e));
      await fanout.start();
      await board.refresh();
      rt.stopTicking = every(rt.clock, options.heartbeatMs, () => rt.tick());
      return rt;
    } catch (err) {
      // Start-up failed: `err` is what the caller must see, not a close error after it.
      await queue?.close().catch(() => undefined);
      redis.disconnect();
      tail.disconnect();
      throw err;
    }
  }

  dataSources(): readonly string[] {
    return this.sources;
  }

  submit(instance: unknown, sampling?: unknown, opts: SubmitOptions = {}): ClusterRolloutHandle {
    const v = this.validate(instance, sampling);
    this.checkAdmission(1);
    const id = opts.id ?? randomUUID();
    const [handle] = this.enqueue([{ id, instance: v.instance, sampling: v.sampling, groupId: opts.groupId ?? null, priority: opts.priority ?? 0 }]);
    return handle!;
  }

  submitGroup(instance: unknown, sampling: unknown, n: number, opts: { groupId?: string } = {}): GroupHandle & { accepted: Promise<void> } {
    if (!Number.isInteger(n) || n < 1) throw new ValidationError('group size n must be a positive integer', [{ path: 'n', message: 'must be a positive integer' }]);
    const v = this.validate(instance, sampling);
    this.checkAdmission(n);
    const groupId = opts.groupId ?? randomUUID();
    // One job per member (not a BullMQ flow): members spread over workers like any rollout, and
    // the gateway assembles the group, so a flow's parent job would add a write and nothing else.
    const rollouts = this.enqueue(
      Array.from({ length: n }, (_, i) => ({ id: randomUUID(), instance: { ...v.instance, trajectory_id: String(i) }, sampling: v.sampling, groupId, priority: 0 })),
    );
    return {
      groupId,
      rollouts,
      results: Promise.all(rollouts.map((r) => r.result)),
      accepted: rollouts[0]!.accepted,
      cancel: async (reason?: string) => {
        await Promise.all(rollouts.map((r) => r.cancel(reason)));
      },
    };
  }

  /**
   * Cancels a rollout wherever it is: still queued, the job is removed and a `cancelled` result
   * committed here; running, its worker gets the cancel over pub/sub (and a worker taking the job
   * later sees the marker). False when the rollout is unknown or already ended.
   */
  async cancel(id: string, reason = 'cancelled'): Promise<boolean> {
    if (this.state !== 'running') return false;
    if (await this.store.result(id)) return false;
    const job = await this.queue.getJob(id);
    if (!job) return false;
    const msg: ClusterControl = { type: 'cancel', id, reason };
    await this.redis.multi().set(this.keys.cancel(id), reason, 'EX', this.options.resultTtlSec).publish(this.keys.control, JSON.stringify(msg)).exec();
    // remove() answers 0 for a job a worker holds (locked): that worker cancels it.
    if ((await this.queue.remove(id)) === 1) {
      const data = job.data as ClusterJobData;
      await this.store.commit(cancelledResult(id, data, reason, this.now()), this.now());
    }
    return true;
  }

  get(id: string): RolloutSummary | undefined {
    const t = this.tracked.get(id);
    return t ? { ...t.summary } : undefined;
  }

  /** Like {@link get}, but asks Redis for a rollout this gateway has not seen (submitted elsewhere, or before a restart). */
  async lookup(id: string): Promise<RolloutSummary | undefined> {
    const local = this.get(id);
    if (local?.result) return local;
    const result = await this.store.result(id);
    if (result) {
      this.finish(id, result);
      return this.get(id);
    }
    const s = await this.store.summary(id);
    const job = s ? null : await this.queue.getJob(id);
    if (!s && !job) return local;
    const meta = s?.meta ?? null;
    const data = job?.data as ClusterJobData | undefined;
    const inst = (data?.instance ?? {}) as Partial<Instance>;
    return {
      id,
      instanceId: str(meta?.['instanceId']) ?? inst.instance_id ?? null,
      groupId: str(meta?.['groupId']) ?? data?.groupId ?? null,
      trajectoryId: str(meta?.['trajectoryId']) ?? inst.trajectory_id ?? null,
      dataSource: str(meta?.['dataSource']) ?? inst.data_source ?? 'unknown',
      state: s?.state ?? 'queued',
      turn: s?.turn ?? 0,
      tokens: local?.tokens ?? 0,
      attempt: s?.attempt ?? 0,
      submittedAt: data?.submittedAt ?? local?.submittedAt ?? 0,
      result: null,
    };
  }

  list(filter: { state?: string; groupId?: string; outcome?: string } = {}): RolloutSummary[] {
    const out: RolloutSummary[] = [];
    for (const t of this.tracked.values()) {
      const s = t.summary;
      if (filter.state && s.state !== filter.state) continue;
      if (filter.groupId && s.groupId !== filter.groupId) continue;
      if (filter.outcome && s.result?.outcome !== filter.outcome) continue;
      out.push({ ...s });
    }
    return out;
  }

  events(opts: EventsOptions = {}): ReturnType<EventFanout['subscribe']> {
    return this.fanout.subscribe(opts);
  }

  status(): RuntimeStatus {
    return { ...this.board.status(), state: this.state };
  }

  /** Resolves once every backend / weight-version change made so far is in Redis and announced. */
  flushed(): Promise<void> {
    return this.backends.flush().then(() => undefined);
  }

  /** Every worker stops taking new jobs (running rollouts go on). */
  async pause(): Promise<void> {
    await this.control({ type: 'pause' }, (m) => m.hset(this.keys.settings, 'paused', '1'));
  }

  /** Every worker takes jobs again. */
  async resume(): Promise<void> {
    await this.control({ type: 'resume' }, (m) => m.hdel(this.keys.settings, 'paused'));
  }

  addBackend = (spec: Parameters<GatewayBackends['addBackend']>[0]): ReturnType<GatewayBackends['addBackend']> => this.backends.addBackend(spec);
  drainBackend = (id: string): boolean => this.backends.drainBackend(id);
  removeBackend = (id: string): boolean => this.backends.removeBackend(id);
  listBackends = (): ReturnType<GatewayBackends['listBackends']> => this.backends.listBackends();
  /** The workers heard from within the last few heartbeats (the operational log's worker up/down lines). */
  workerIds = (): string[] => this.board.live.map((n) => n.nodeId);
  /** The live workers' last heartbeats (Polar's `/nodes`), and the period they beat at. */
  workerNodes = (): { heartbeatMs: number; nodes: readonly ClusterNodeStatus[] } => ({ heartbeatMs: this.options.heartbeatMs, nodes: this.board.live });
  setWeightVersion = (version: string | number, backendId?: string): void => this.backends.setWeightVersion(version, backendId);

  /** The last generation pause/resume sent to the workers (its epoch names it in their heartbeats). */
  private generation = { paused: false, epoch: '' };
  /** New LLM calls wait on every worker (calls in flight finish); {@link generationDrain} says when they did. */
  pauseGeneration = (): void => this.sendGeneration(true);
  /** New LLM calls go again on every worker. */
  resumeGeneration = (): void => this.sendGeneration(false);
  get generationPaused(): boolean {
    return this.generation.paused;
  }

  /**
   * Whether every live worker applied the last pause/resume (its heartbeat names that epoch) and
   * the LLM calls they have in flight. A worker that cannot pause never acknowledges.
   */
  generationDrain = (): { acked: boolean; inflight: number } => {
    const nodes = this.board.live;
    return {
      acked: nodes.every((n) => n.generation?.epoch === this.generation.epoch && n.generation.paused === this.generation.paused),
      inflight: nodes.reduce((s, n) => s + (n.generation?.inflight ?? 0), 0),
    };
  };

  private sendGeneration(paused: boolean): void {
    const g = { paused, epoch: randomUUID() };
    this.generation = g;
    // Kept in the settings too: a worker that joins later starts in the same state. A failed
    // send is never acknowledged, so a caller waiting on generationDrain times out.
    void this.control({ type: 'generation', ...g }, (m) => m.hset(this.keys.settings, 'generation', JSON.stringify(g))).catch(() => undefined);
  }

  /**
   * Detaches this gateway: stops the tail, rejects results still awaited here with
   * RuntimeClosedError (a `/process` caller gets a 503 and retries; the rollout goes on and its
   * result stays in Redis), closes the connections. Cancels nothing.
   */
  async close(): Promise<void> {
    if (this.state !== 'running') return;
    this.state = 'closing';
    this.stopTicking?.();
    await this.backends.flush();
    for (const t of this.tracked.values()) {
      t.waiter?.reject(new RuntimeClosedError('the gateway closed; the rollout goes on in the cluster and its result stays fetchable'));
      t.waiter = null;
    }
    await this.fanout.close();
    // Closing: a lost connection leaves nothing to release.
    await this.queue.close().catch(() => undefined);
    await this.redis.quit().catch(() => this.redis.disconnect());
    this.state = 'closed';
  }

  private validate(instance: unknown, sampling: unknown): { instance: Instance; sampling: Record<string, unknown> } {
    const i = InstanceSchema.safeParse(instance);
    if (!i.success) throw new ValidationError('invalid instance', i.error.issues.map((x) => ({ path: ['instance', ...x.path.map(String)].join('.'), message: x.message })));
    const s = SamplingParamsSchema.safeParse(sampling ?? {});
    if (!s.success) throw new ValidationError('invalid sampling params', s.error.issues.map((x) => ({ path: ['sampling', ...x.path.map(String)].join('.'), message: x.message })));
    return { instance: i.data, sampling: s.data };
  }

  private checkAdmission(n: number): void {
    if (this.state !== 'running') throw new RuntimeClosedError();
    const waiting = this.board.waiting;
    if (waiting + n > this.options.maxQueued) {
      throw new QueueFullError(`cluster queue is full (${waiting} waiting, limit maxQueued=${this.options.maxQueued})`, { queued: waiting, maxQueued: this.options.maxQueued });
    }
  }

  private enqueue(items: { id: string; instance: Instance; sampling: Record<string, unknown>; groupId: string | null; priority: number }[]): ClusterRolloutHandle[] {
    const submittedAt = this.now();
    const fresh: typeof items = [];
    const handles = items.map((it) => {
      let t = this.tracked.get(it.id);
      if (!t || (!t.waiter && !t.summary.result)) {
        t = this.track(it.id, it.instance, it.groupId, submittedAt);
        fresh.push(it);
      } else if (!t.waiter && t.summary.result) {
        // A finished rollout submitted again under its id: the same result (idempotent by id).
        const r = t.summary.result;
        t.waiter = deferred();
        t.waiter.resolve(r);
      }
      return this.handle(it.id, t);
    });
    const accepted = (async () => {
      if (fresh.length === 0) return;
      // BullMQ ignores an add whose jobId exists: a resubmit while queued or running attaches.
      await this.queue.addBulk(
        fresh.map((it) => ({
          name: 'rollout',
          data: { instance: it.instance, sampling: it.sampling, groupId: it.groupId, submittedAt } satisfies ClusterJobData,
          opts: { jobId: it.id, removeOnComplete: true, removeOnFail: true, priority: bullPriority(it.priority) },
        })),
      );
      // A rollout that had already finished (its job removed) is answered from its stored result;
      // the job just added for it finds the result and does not run.
      const done = await this.store.results(fresh.map((f) => f.id));
      done.forEach((r, i) => r && this.finish(fresh[i]!.id, r));
    })();
    accepted.catch((err: unknown) => {
      for (const it of fresh) {
        const t = this.tracked.get(it.id);
        t?.waiter?.reject(new InfraError(`could not enqueue rollout ${it.id}: ${(err as Error).message}`, { cause: err }));
        if (t) t.waiter = null;
      }
    });
    return handles.map((h) => Object.assign(h, { accepted }));
  }

  private track(id: string, instance: Instance, groupId: string | null, submittedAt: number): Tracked {
    const prev = this.tracked.get(id);
    const t: Tracked = {
      summary: prev?.summary ?? {
        id,
        instanceId: instance.instance_id ?? null,
        groupId,
        trajectoryId: instance.trajectory_id ?? null,
        dataSource: instance.data_source,
        state: 'queued',
        turn: 0,
        tokens: 0,
        attempt: 0,
        submittedAt,
        result: null,
      },
      waiter: deferred(),
    };
    this.tracked.set(id, t);
    return t;
  }

  private handle(id: string, t: Tracked): RolloutHandle {
    const w = t.waiter!;
    return {
      id,
      result: w.promise,
      cancel: async (reason?: string) => {
        if (this.state !== 'running') return;
        await this.cancel(id, reason);
        // Its rejection is its waiter's to report; here only its end matters.
        await w.promise.catch(() => undefined);
      },
    };
  }

  private onEvent(e: StoredEvent): void {
    const ev = e.ev;
    let t = this.tracked.get(ev.rolloutId);
    if (ev.type === 'rollout.submitted') {
      if (!t) {
        t = { summary: { id: ev.rolloutId, instanceId: ev.instanceId, groupId: ev.groupId, trajectoryId: ev.trajectoryId, dataSource: ev.dataSource, state: 'queued', turn: 0, tokens: 0, attempt: ev.attempt, submittedAt: ev.ts, result: null }, waiter: null };
        this.tracked.set(ev.rolloutId, t);
      }
      t.summary.attempt = Math.max(t.summary.attempt, ev.attempt);
      return;
    }
    if (!t || t.summary.result) return;
    if (ev.type === 'rollout.state') {
      t.summary.state = ev.state;
      t.summary.turn = ev.turn;
    } else if (ev.type === 'llm.end') {
      t.summary.tokens += ev.outputTokens;
    } else if (ev.type === 'rollout.result') {
      // A failed read is retried by the sweep (the safety net for missed signals) on its next tick.
      void this.store.result(ev.rolloutId).then((r) => r && this.finish(ev.rolloutId, r), () => undefined);
    }
  }

  private finish(id: string, r: RolloutResult): void {
    let t = this.tracked.get(id);
    if (!t) {
      t = { summary: { id, instanceId: r.instanceId, groupId: r.groupId, trajectoryId: r.trajectoryId, dataSource: r.dataSource, state: 'queued', turn: 0, tokens: 0, attempt: r.attempts, submittedAt: this.now() - r.timing.wallMs, result: null }, waiter: null };
      this.tracked.set(id, t);
    }
    if (t.summary.result) return;
    Object.assign(t.summary, { state: finalState(r.outcome), turn: r.trajectory.turns.length, tokens: r.trajectory.tokens.length, attempt: r.attempts, result: r });
    t.waiter?.resolve(r);
    t.waiter = null;
    this.finishedOrder.push(id);
    if (this.finishedOrder.length > this.retainResults) {
      const drop = this.finishedOrder.length - this.retainResults;
      for (const old of this.finishedOrder.slice(0, drop)) {
        const o = this.tracked.get(old);
        if (o?.summary.result && !o.waiter) this.tracked.delete(old);
      }
      this.finishedOrder = this.finishedOrder.slice(drop);
    }
  }

  /** Heartbeat: node board refresh, and a sweep for results whose stream signal was missed. */
  private tick(): void {
    // A failed refresh keeps the last board; the next tick retries.
    void this.board.refresh().catch(() => undefined);
    if (this.sweeping) return;
    const ids: string[] = [];
    for (const [id, t] of this.tracked) if (t.waiter) ids.push(id);
    if (ids.length === 0) return;
    this.sweeping = true;
    // Its rejection is caught below (see there).
    void (async () => {
      for (let i = 0; i < ids.length; i += 500) {
        const chunk = ids.slice(i, i + 500);
        const rs = await this.store.results(chunk);
        rs.forEach((r, j) => r && this.finish(chunk[j]!, r));
      }
    })()
      // The sweep is a safety net for missed stream signals: a failed one is retried next tick.
      .catch(() => undefined)
      .finally(() => {
        this.sweeping = false;
      });
  }

  private async control(msg: ClusterControl, fn: (m: ReturnType<Redis['multi']>) => unknown): Promise<void> {
    const m = this.redis.multi();
    fn(m);
    m.publish(this.keys.control, JSON.stringify(msg));
    await m.exec();
  }
}

function str(v: unknown): string | null | undefined {
  return typeof v === 'string' ? v : v === null ? null : undefined;
}

function deferred<T = RolloutResult>(): { promise: Promise<T>; resolve(v: T): void; reject(e: unknown): void } {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  // A result nobody awaits (a /v1 submit) must not become an unhandled rejection at close.
  promise.catch(() => undefined);
  return { promise, resolve, reject };
}

/** BullMQ's highest priority value (`PRIORITY_LIMIT`, 2^21 - 1). */
const BULL_PRIORITY_LIMIT = 2 ** 21 - 1;
/** Our priority 0 in BullMQ's terms: the middle of its range, so priorities either side of 0 fit. */
const BULL_PRIORITY_ZERO = 2 ** 20;

/**
 * `SubmitOptions.priority` (higher first, default 0) as a BullMQ job priority (lower first, 1 the
 * highest): every job gets one, because BullMQ serves jobs without a priority (0) before every
 * prioritized one. FIFO within a priority is BullMQ's own; a started job is never preempted.
 * Priorities beyond about ±2^20 share the end of the range.
 */
export function bullPriority(priority: number): number {
  const p = Number.isFinite(priority) ? Math.round(priority) : 0;
  return Math.min(BULL_PRIORITY_LIMIT, Math.max(1, BULL_PRIORITY_ZERO - p));
}
