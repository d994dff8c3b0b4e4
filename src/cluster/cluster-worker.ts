import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { WaitingError, Worker, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import { ClusterControlSchema, ClusterJobDataSchema, type ClusterBackend, type ClusterJobData, type ClusterNodeStatus } from '../protocol/cluster.js';
import type { RolloutHandle } from '../runtime/runtime-api.js';
import type { RuntimeFactory, ServiceRuntime, BackendControl } from '../server/service-runtime.js';
import type { SharedBackendLoad } from '../llm/shared-backend-load.js';
import { BackendLoadBoard } from './backend-load-board.js';
import { applyRegistry, readRegistry } from './backend-registry.js';
import { cancelledResult, failedJobResult } from './cancelled-result.js';
import { ClusterKeys } from './cluster-keys.js';
import { parseClusterOptions, type ClusterOptions, type ClusterOptionsInput } from './cluster-options.js';
import { ClusterStore } from './cluster-store.js';
import { EventSink } from './event-sink.js';
import { NodeHealth, sandboxFault } from './node-health.js';
import { redisConnection } from './redis-connection.js';
import { every, systemClock, type Clock, type TimerHandle } from '../clock.js';

/** What a worker node is made of besides cluster options. */
export interface ClusterWorkerParts {
  /**
   * Makes the node's embedded runtime (its sandboxes, stage pools, backend pool). Give
   * `ctx.sharedLoad` to the backend pool (`BackendPoolDeps.sharedLoad`) so its least-loaded picks
   * count the other workers' calls; a factory that ignores it still works, each node then
   * balancing only its own calls.
   */
  createRuntime: RuntimeFactory | ((ctx: WorkerRuntimeContext) => ReturnType<RuntimeFactory>);
  /** Rollouts this node runs at once: BullMQ takes no more jobs than this. */
  capacity: number;
  /** Default: `<hostname>-<pid>-<random>`. */
  nodeId?: string | undefined;
  /** The clock of timestamps, the heartbeat and the load board. Default the system clock. */
  clock?: Clock | undefined;
  /** Called for what the node wants an operator to know (lost Redis, a bad control message). */
  log?: ((line: string) => void) | undefined;
  /**
   * Starts one sandbox of the node and closes it; rejects when the node cannot run sandboxes.
   * Given, a rollout that ends with a sandbox fault makes the node stop taking jobs and probe
   * (node-health.ts): unhealthy, it hands the job back for another node and takes none until a
   * probe passes. Absent, the node never stops for sandbox faults.
   */
  probeSandbox?: (() => Promise<void>) | undefined;
  /** Probe period while unhealthy. Default 5,000 ms. */
  healthProbeMs?: number | undefined;
}

/** Times one job may be handed back by unhealthy nodes before its failure is committed. */
const MAX_HAND_BACKS = 3;

/** What a worker hands its runtime factory. */
export interface WorkerRuntimeContext {
  /** The cluster-wide load of each backend (other workers' in-flight calls). */
  sharedLoad: SharedBackendLoad;
}

/**
 * A worker node (`rollout worker --redis`): one embedded runtime fed by BullMQ jobs. The runtime
 * does not know where its work comes from — this class is the job source (a BullMQ Worker with
 * concurrency = capacity, each job one `submit`) and the sink (events appended to the cluster's
 * stream, the result committed once in Redis). Cancels, backend changes, weight versions and
 * pause/resume arrive on the control channel.
 *
 * A node killed with SIGKILL stops renewing its job locks; BullMQ's stalled check on the other
 * nodes puts those jobs back and another node runs them as a new attempt. A node closed
 * gracefully puts its running jobs back at once.
 */
export class ClusterWorker {
  readonly nodeId: string;
  private readonly live = new Map<string, RolloutHandle>();
  /** Jobs between pick-up and local submit, and cancels that arrived for them meanwhile. */
  private readonly cancels = new Map<string, string>();
  private readonly applied = new Map<string, ClusterBackend>();
  private worker: Worker | null = null;
  private stopBeating: (() => void) | null = null;
  private readonly clock: Clock;
  private forward: Promise<void> = Promise.resolve();
  private readonly stopEvents = new AbortController();
  private closing: Promise<void> | null = null;
  private registryChain: Promise<void> = Promise.resolve();
  private readonly now: () => number;
  private readonly log: (line: string) => void;
  private readonly sink: EventSink;
  /** The cluster-wide pause (the settings' `paused`, pause/resume notices); the node's own health pauses apart. */
  private clusterPaused = false;
  /**
   * Notices handled so far, by the setting they change. A settings read that one of them overtook
   * (the notice came in on the subscriber connection before the read's answer) may be older than
   * that notice: what it read of that setting is not used, and the notices, each published in the
   * transaction that writes its setting, bring this node to the cluster's state.
   */
  private readonly notices = { paused: 0, generation: 0 };
  private readonly health: NodeHealth | null;

  private readonly runtime: ServiceRuntime;
  private readonly redis: Redis;
  private readonly sub: Redis;
  private readonly store: ClusterStore;
  private readonly load: BackendLoadBoard;

  /** Made by {@link start}, with the runtime, connections and collaborators it opened. */
  private constructor(
    readonly options: ClusterOptions,
    private readonly parts: ClusterWorkerParts,
    conn: { runtime: ServiceRuntime; redis: Redis; sub: Redis; store: ClusterStore; load: BackendLoadBoard },
  ) {
    const store = conn.store;
    this.runtime = conn.runtime;
    this.redis = conn.redis;
    this.sub = conn.sub;
    this.store = store;
    this.load = conn.load;
    this.nodeId = parts.nodeId!;
    this.clock = parts.clock ?? systemClock;
    this.now = () => this.clock.now();
    this.log = parts.log ?? (() => undefined);
    this.sink = new EventSink(store, this.log);
    this.health = parts.probeSandbox
      ? new NodeHealth({
          probe: parts.probeSandbox,
          pause: () => void this.worker?.pause(true).catch((err: Error) => this.log(`pause: ${err.message}`)),
          resume: () => this.resumeIfAllowed(),
          probeMs: parts.healthProbeMs ?? 5_000,
          log: this.log,
          clock: this.clock,
        })
      : null;
  }

  /** Why this node takes no jobs (its sandboxes fail), or null while healthy. */
  get unhealthy(): string | null {
    return this.health?.unhealthy ?? null;
  }

  /** Takes jobs again unless the cluster is paused, the node unhealthy or closing. */
  private resumeIfAllowed(): void {
    const w = this.worker;
    if (!w || this.closing || this.clusterPaused || this.unhealthy !== null) return;
    // resume() restarts the main loop itself when it stopped; run() again only if it did not.
    w.resume()
      .then(() => (w.isRunning() ? undefined : w.run()))
      .catch((err: Error) => this.log(`resume: ${err.message}`));
  }

  /** The node's runtime as its operational log reads it: status and backends, nothing to drive. */
  get observed(): Pick<ServiceRuntime, 'status' | 'listBackends'> {
    return this.runtime;
  }

  /** Connects, makes the runtime, applies the backend registry and settings, starts taking jobs. */
  static async start(input: ClusterOptionsInput, parts: ClusterWorkerParts): Promise<ClusterWorker> {
    const options = parseClusterOptions(input);
    if (!Number.isInteger(parts.capacity) || parts.capacity < 1) throw new RangeError(`capacity must be a positive integer, got ${parts.capacity}`);
    const keys = new ClusterKeys(options.prefix);
    const redis = redisConnection(options.redis);
    const sub = redisConnection(options.redis);
    const nodeId = parts.nodeId ?? `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;
    const log = parts.log ?? (() => undefined);
    // A TTL shorter than two periods would let a live node's load blink out between its ticks.
    const load = new BackendLoadBoard({ redis, keys, nodeId, intervalMs: options.loadShareMs, ttlMs: Math.max(options.loadTtlMs, 2 * options.loadShareMs), log, clock: parts.clock });
    let runtime: ServiceRuntime | null = null;
    try {
      await Promise.all([redis.ping(), sub.ping()]);
      runtime = await parts.createRuntime({ sharedLoad: load });
      const node = new ClusterWorker(options, { ...parts, nodeId }, { runtime, redis, sub, store: new ClusterStore(redis, keys, options), load });
      await node.begin();
      return node;
    } catch (err) {
      // Start-up failed: `err` is what the caller must see, not a close error after it.
      await runtime?.close().catch(() => undefined);
      redis.disconnect();
      sub.disconnect();
      throw err;
    }
  }

  private get keys(): ClusterKeys {
    return this.store.keys;
  }

  private async begin(): Promise<void> {
    // Control first, so no change between reading the registry and subscribing is missed.
    this.sub.on('message', (_ch: string, msg: string) => this.onControl(msg));
    await this.sub.subscribe(this.keys.control);
    await this.syncRegistry();
    // Each backend's weight version came with the registry: a cluster-wide version is written to
    // every registered backend's entry, and a later one set for one backend or a backend added
    // since must not be overwritten by it.
    const seen = { ...this.notices };
    const settings = await this.redis.hgetall(this.keys.settings);
    if (seen.paused === this.notices.paused) this.clusterPaused = settings['paused'] === '1';
    if (settings['generation'] !== undefined && seen.generation === this.notices.generation) {
      try {
        const g = JSON.parse(settings['generation']) as { paused: boolean; epoch: string };
        this.applyGeneration(g.paused === true, String(g.epoch));
      } catch {
        this.log('ignoring a malformed generation setting');
      }
    }
    this.forward = this.forwardEvents();
    // The other workers' backend load, before this node's first job picks a backend.
    await this.load.start();
    this.worker = new Worker(this.keys.queue, (job, token) => this.process(job, token), {
      // Connection options (not our client): BullMQ then owns and closes its two connections.
      connection: { url: this.options.redis, retryStrategy: (times: number) => Math.min(50 * times, 1000) },
      prefix: this.options.prefix,
      concurrency: this.parts.capacity,
      name: this.nodeId,
      lockDuration: this.options.lockDurationMs,
      stalledInterval: this.options.stalledIntervalMs,
      maxStalledCount: this.options.maxStalledCount,
      autorun: !this.clusterPaused,
    });
    this.worker.on('error', (err) => this.log(`worker: ${err.message}`));
    this.worker.on('failed', (job, err) => {
      // Only failures outside a rollout end here (a rollout's own failure is a result).
      if (job?.id) void this.commitFailed(job.id, job.data as ClusterJobData, err.message, job.attemptsStarted);
    });
    await this.heartbeat();
    // A missed beat is retried by the next one; the board expires a node only after several.
    this.stopBeating = every(this.clock, this.options.heartbeatMs, () => void this.heartbeat().catch(() => undefined));
  }

  /** Rollouts running on this node now. */
  get running(): number {
    return this.live.size;
  }

  /** True while the node's queue consumer is paused (a cluster pause, or its own ill health): it takes no new job. */
  get paused(): boolean {
    return this.worker?.isPaused() ?? true;
  }

  private backendControl(): (ServiceRuntime & Partial<BackendControl>) | null {
    return this.runtime.addBackend ? this.runtime : null;
  }

  private async process(job: Job, token: string | undefined): Promise<{ committed: boolean }> {
    const id = job.id!;
    if (!this.cancels.has(id)) this.cancels.set(id, '');
    try {
      const parsed = ClusterJobDataSchema.safeParse(job.data);
      if (!parsed.success) {
        return { committed: await this.store.commit(failedJobResult(id, job.data as ClusterJobData, 'malformed job data', job.attemptsStarted, this.now()), this.now()) };
      }
      const data = parsed.data;
      // One round trip: is there a result already (the job was put back after its node
      // committed, then died), a cancel marker, a cluster-wide pause?
      const pauseNotices = this.notices.paused;
      const [done, cancelMark, pausedSetting] = await Promise.all([
        this.redis.exists(this.keys.result(id)),
        this.redis.get(this.keys.cancel(id)),
        this.redis.hget(this.keys.settings, 'paused'),
      ]);
      if (done) return { committed: false };
      const marker = this.cancels.get(id) || cancelMark;
      // Overtaken by a resume, the read's "paused" would pause this node after it: for good.
      const paused = pauseNotices === this.notices.paused ? pausedSetting === '1' : this.clusterPaused;
      if (!marker && paused) {
        // Paused while this job was already on its way here: hand it back untouched.
        this.worker?.pause(true).catch((err: Error) => this.log(`pause: ${err.message}`));
        return this.handBack(job, token);
      }
      if (marker) return { committed: await this.store.commit(cancelledResult(id, data, marker, this.now()), this.now()) };
      // Backend and weight-version notices that arrived before this job are applied first.
      // A failed sync was logged where it failed; the job runs on the registry as last applied.
      await this.registryChain.catch(() => undefined);
      let h = this.live.get(id);
      const seen = new Promise<void>((r) => this.resultSeen.set(id, r));
      if (!h) {
        // Closing, or unhealthy (a job fetched just before the pause took effect): another node runs it.
        if (this.closing || this.unhealthy !== null) return this.handBack(job, token);
        h = this.runtime.submit(data.instance, data.sampling, { id, ...(data.groupId ? { groupId: data.groupId } : {}) });
        this.live.set(id, h);
      }
      const late = this.cancels.get(id);
      this.cancels.delete(id);
      // cancel() settles the rollout's result; its own rejection (runtime closing) changes nothing here.
      if (late) void h.cancel(late).catch(() => undefined);
      const result = await h.result;
      this.live.delete(id);
      // A sandbox fault: is it this node's? Unhealthy, the job goes to another node (bounded).
      const fault = this.health && !this.closing ? sandboxFault(result) : null;
      if (fault && !(await this.health!.report(fault)) && job.attemptsStarted <= MAX_HAND_BACKS) return this.handBack(job, token);
      if (this.closing && result.outcome === 'cancelled' && !late && !this.cancelledHere.has(id)) {
        // Cancelled by this node's own shutdown, not by anyone's request: hand the job back.
        return this.handBack(job, token);
      }
      this.cancelledHere.delete(id);
      await this.eventsWritten(id, seen);
      // Attempts made on nodes that died before this one count too.
      const prior = Math.max(0, job.attemptsStarted - 1);
      // Stamped with this node's id: the gateway (Polar's `node_id`) names the worker that ran it.
      return { committed: await this.store.commit({ ...result, attempts: result.attempts + prior, nodeId: this.nodeId }, this.now()) };
    } finally {
      this.cancels.delete(id);
      this.resultSeen.delete(id);
    }
  }

  private readonly cancelledHere = new Set<string>();

  /** Puts a job back in the queue untouched (another node, or this one later, runs it). */
  private async handBack(job: Job, token: string | undefined): Promise<never> {
    await job.moveToWait(token);
    throw new WaitingError();
  }
  /** Per running rollout: called when the forwarder reaches its `rollout.result` event. */
  private readonly resultSeen = new Map<string, () => void>();

  /**
   * Resolves once the rollout's events (up to its result event) are in the stream, so the
   * committed result event follows them. Bounded: a dropped event must not hold a result back.
   */
  private eventsWritten(id: string, seen: Promise<void>): Promise<void> {
    let timer: TimerHandle | undefined;
    const cap = new Promise<void>((r) => {
      timer = this.clock.setTimeout(r, 2000);
    });
    return Promise.race([seen, cap]).then(() => {
      this.clock.clearTimeout(timer);
      this.resultSeen.delete(id);
      return this.sink.drained();
    });
  }

  private onControl(raw: string): void {
    let msg;
    try {
      const r = ClusterControlSchema.safeParse(JSON.parse(raw));
      if (!r.success) return this.log('ignoring a malformed control message');
      msg = r.data;
    } catch {
      return this.log('ignoring a malformed control message');
    }
    switch (msg.type) {
      case 'cancel': {
        if (this.cancels.has(msg.id)) this.cancels.set(msg.id, msg.reason);
        const h = this.live.get(msg.id);
        if (h) {
          this.cancelledHere.add(msg.id);
          // The rollout's end reaches the store through its result; a rejected cancel (runtime closing) has nothing to add.
          void h.cancel(msg.reason).catch(() => undefined);
        }
        return;
      }
      case 'backends':
        // Logged; the next `backends` message syncs again.
        void this.syncRegistry().catch((err: Error) => this.log(`backend registry: ${err.message}`));
        return;
      case 'weight-version':
        // After the registry is applied: a backend added by a notice still in flight must get
        // the version too.
        void this.syncRegistry()
          .then(() => this.backendControl()?.setWeightVersion?.(msg.version, msg.backendId))
          .catch((err: Error) => this.log(`weight version: ${err.message}`));
        return;
      case 'pause':
        this.notices.paused++;
        this.clusterPaused = true;
        this.worker?.pause(true).catch((err: Error) => this.log(`pause: ${err.message}`));
        return;
      case 'resume':
        this.notices.paused++;
        this.clusterPaused = false;
        this.resumeIfAllowed();
        return;
      case 'generation':
        this.notices.generation++;
        this.applyGeneration(msg.paused, msg.epoch);
        // The gateway waits for this node's word: say it now, not at the next beat.
        void this.heartbeat().catch(() => undefined);
        return;
    }
  }

  /** The epoch of the generation pause/resume applied last ('' for none). */
  private generationEpoch = '';

  /** Holds (or releases) the runtime's new LLM calls; calls in flight finish. */
  private applyGeneration(paused: boolean, epoch: string): void {
    const rt = this.runtime;
    if (!rt.pauseGeneration || !rt.resumeGeneration) return;
    if (paused) rt.pauseGeneration();
    else rt.resumeGeneration();
    this.generationEpoch = epoch;
  }

  /** Re-reads the registry and applies it; serialized, so two notices never interleave. */
  private syncRegistry(): Promise<void> {
    this.registryChain = this.registryChain.then(async () => {
      const rt = this.backendControl();
      if (!rt?.addBackend || !rt.removeBackend || !rt.drainBackend || !rt.listBackends) return;
      applyRegistry(rt as ServiceRuntime & BackendControl, await readRegistry(this.redis, this.keys), this.applied);
    });
    return this.registryChain;
  }

  /** The sink: every event of the embedded runtime to the cluster stream, in order. */
  private async forwardEvents(): Promise<void> {
    try {
      for await (const item of this.runtime.events({ signal: this.stopEvents.signal, bufferSize: 100_000 })) {
        if (item.type === 'gap') {
          this.log(`event stream: dropped events ${item.from}..${item.to} (Redis too slow)`);
          continue;
        }
        // The result event is written by the commit, only for the result that wins.
        if (item.type === 'rollout.result') {
          this.resultSeen.get(item.rolloutId)?.();
          continue;
        }
        const groupId = item.type === 'rollout.submitted' ? item.groupId : (this.runtime.get(item.rolloutId)?.groupId ?? null);
        this.sink.push(item, groupId);
      }
    } catch {
      // The runtime closed.
    }
  }

  private async commitFailed(id: string, data: ClusterJobData, message: string, attempts: number): Promise<void> {
    try {
      await this.store.commit(failedJobResult(id, data, message, attempts, this.now()), this.now());
    } catch (err) {
      this.log(`could not commit the failure of ${id}: ${(err as Error).message}`);
    }
  }

  private async heartbeat(): Promise<void> {
    const s = this.runtime.status();
    const hb: ClusterNodeStatus = {
      nodeId: this.nodeId,
      pid: process.pid,
      capacity: this.parts.capacity,
      running: this.live.size,
      queued: s.queued,
      stages: s.stages,
      completed: s.completed,
      outcomes: s.outcomes,
      ...(this.unhealthy !== null ? { unhealthy: this.unhealthy } : {}),
      ...(this.runtime.pauseGeneration
        ? { generation: { paused: this.runtime.generationPaused ?? false, epoch: this.generationEpoch, inflight: (this.runtime.listBackends?.() ?? []).reduce((n, b) => n + b.inFlight, 0) } }
        : {}),
      at: this.now(),
    };
    await this.redis.hset(this.keys.nodes, this.nodeId, JSON.stringify(hb));
  }

  /**
   * Leaves the cluster: stops taking jobs, hands running jobs back to the queue (another node
   * runs them as a new attempt), closes the runtime (sandboxes killed) and the connections.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      this.stopBeating?.();
      this.health?.close();
      const w = this.worker;
      const stopped = w?.close() ?? Promise.resolve();
      await this.runtime.close({ drain: false });
      // Closing: the worker's close error (a lost connection) cannot be acted on; its jobs are recovered as stalled.
      await stopped.catch(() => undefined);
      this.stopEvents.abort();
      await this.forward;
      await this.sink.drained();
      await this.load.close();
      // Best effort on the way out: a node entry left behind expires with its heartbeat.
      await this.redis.hdel(this.keys.nodes, this.nodeId).catch(() => undefined);
      await Promise.all([this.redis.quit().catch(() => undefined), this.sub.quit().catch(() => undefined)]);
    })();
    return this.closing;
  }
}
