import { randomUUID } from 'node:crypto';
import type { RolloutHandle } from '../../runtime/runtime-api.js';
import type { Clock, TimerHandle } from '../../clock.js';
import type { RolloutState } from '../../protocol/events.js';
import { checkCapacity } from '../capacity.js';
import { checkDataSource } from '../data-source.js';
import { HttpError } from '../http-error.js';
import { confineInstancePaths } from '../path-roots.js';
import type { ServiceContext } from '../service-context.js';
import type { ServiceRuntime } from '../service-runtime.js';
import type { EvaluatorName, SessionResult, SessionStatus, TaskRequest, TaskState, TaskStatus } from './polar-models.js';
import { PolarEventBus } from './polar-events.js';
import { isUsable, toSessionResult, type EndedBy } from './session-result.js';
import { postCallback } from './task-callback.js';
import { taskImage, requireLocalImage, type TaskImage } from './task-image.js';
import { toInstance } from './task-instance.js';
import { TaskStore, type StoredTask } from './task-store.js';
import { readTaskUploads } from './task-uploads.js';

/** How long a cancelled task id refuses a resubmit (Polar's `_CANCEL_TOMBSTONE_TTL_SECONDS`). */
export const TOMBSTONE_MS = 300_000;
/** Task records kept in memory; older finished ones are still answered from the state dir. */
const MAX_RECORDS = 10_000;

/** Our rollout states → Polar's session statuses, while a session is live. */
const LIVE_STATUS: Record<string, SessionStatus> = {
  queued: 'REGISTERED',
  initializing: 'INITIALIZING',
  waitingRun: 'READY',
  llmCalling: 'RUNNING',
  acting: 'RUNNING',
  waitingEval: 'POST_RUN',
  evaluating: 'EVALUATING',
};

interface SessionRec {
  id: string;
  handle: RolloutHandle | null;
  state: SessionStatus;
  endedBy: EndedBy;
  initAt: number | null;
  initEndAt: number | null;
  runAt: number | null;
  timers: TimerHandle[];
  result: SessionResult | null;
}

interface TaskRec {
  req: TaskRequest;
  /** The image its sessions run in (`runtime.image` after the server's policy and aliases). */
  image: TaskImage;
  status: TaskState;
  sessions: SessionRec[];
  results: SessionResult[];
  createdAt: number;
  updatedAt: number;
  /** Resolves when every session has its result. */
  settled: Promise<void>;
}

/** What {@link PolarTasks} needs. */
export interface PolarTasksDeps {
  service: ServiceContext;
  stateDir?: string | undefined;
  clock: Clock;
  /** The HTTP client of callbacks (tests inject one). Default global fetch. */
  fetch?: typeof fetch | undefined;
  /** This node's id, on every session result of a single node (a cluster's results name their worker). */
  nodeId: string;
}

/**
 * Polar tasks over the one runtime: a task's `num_samples` sessions are rollouts submitted with
 * the task's `dispatch_priority` (ids `sk-polar-<uuid>`, group `polar:<task_id>`); this class
 * keeps the task records, the per-session deadlines (`timeout_seconds` from the session's INIT,
 * `metadata.agent_timeout` from the session's first RUN state), early stop, the 300 s cancel
 * tombstones, the callbacks, and the records' persistence. Nothing beneath it knows Polar.
 */
export class PolarTasks {
  readonly bus: PolarEventBus;
  private readonly tasks = new Map<string, TaskRec>();
  private readonly tombstones = new Map<string, number>();
  private readonly store: TaskStore;
  private readonly clock: Clock;
  private closed = false;
  /** Callbacks in flight: close() aborts them. */
  private readonly callbacks = new AbortController();
  /** Live sessions by rollout id, for the one event follower. */
  private readonly live = new Map<string, { rec: TaskRec; s: SessionRec }>();
  private follower: { rt: ServiceRuntime; stop: AbortController } | null = null;

  constructor(private readonly deps: PolarTasksDeps) {
    this.store = new TaskStore(deps.stateDir);
    this.clock = deps.clock;
    this.bus = new PolarEventBus(deps.clock);
  }

  /**
   * Admits a task whole or not at all. Throws HttpError 409 (running, or cancelled within 300 s),
   * 429 (`num_samples` past capacity: above the service's `maxBatchRollouts`, or more than the
   * queue can take now; nothing started), 503 (stopped), and ValidationError / 400s naming the
   * field for what cannot run here — among them a `runtime.image` this server's image store lacks.
   */
  async submit(req: TaskRequest): Promise<void> {
    this.refuseDuplicate(req.task_id);
    const opts = this.deps.service.options;
    const max = opts.maxBatchRollouts;
    if (req.num_samples > max) {
      // Polar's "past capacity" is 429 at once (the issue's contract), whatever the cause; the
      // detail says this one is a per-task bound, so waiting will not help.
      throw new HttpError(429, 'TOO_MANY_SESSIONS', `the task asks for ${req.num_samples} sessions; this server takes at most ${max} per task (maxBatchRollouts); nothing was started`, { issues: [{ path: 'num_samples', message: `must be at most ${max} on this server` }] });
    }
    const rt = this.runtime();
    checkDataSource(rt, 'harness', 'agent.harness');
    checkCapacity(rt, req.num_samples);
    const image = taskImage(req.runtime?.image, opts.polarImage, opts.imageAliases);
    // Where this server runs the sandboxes, a missing image is refused now; a gateway has no
    // store: the worker's session then fails IMAGE_NOT_FOUND, said in the session's `error`.
    if (rt.imageStore !== undefined) requireLocalImage(image, rt.imageStore);
    const uploads = await readTaskUploads(req, opts.pathRoots);
    const mapped = toInstance(req, uploads, image.ref);
    confineInstancePaths(mapped.instance, this.deps.service.options.pathRoots, 'runtime');
    // The uploads were read asynchronously: check again before anything starts.
    this.refuseDuplicate(req.task_id);
    checkCapacity(rt, req.num_samples);

    const now = this.clock.now();
    const rec: TaskRec = { req, image, status: 'running', sessions: [], results: [], createdAt: now, updatedAt: now, settled: Promise.resolve() };
    const groupId = `polar:${req.task_id}`;
    // Subscribed before the first submit, so no session's first state is missed.
    this.follow(rt);
    for (let i = 0; i < req.num_samples; i++) {
      const s: SessionRec = { id: `sk-polar-${randomUUID()}`, handle: null, state: 'REGISTERED', endedBy: null, initAt: null, initEndAt: null, runAt: null, timers: [], result: null };
      try {
        // The session id is also its proxy's API key, as in Polar (the agent sees it as *_API_KEY).
        s.handle = rt.submit({ ...mapped.instance, api_key: s.id }, mapped.sampling, { id: s.id, groupId, priority: req.dispatch_priority });
      } catch (err) {
        // All or nothing: the sessions already admitted are withdrawn.
        for (const x of rec.sessions) this.live.delete(x.id);
        this.unfollowIfIdle();
        await Promise.all(rec.sessions.flatMap((x) => (x.handle ? [x.handle.cancel('task refused').catch(() => undefined)] : [])));
        throw err;
      }
      rec.sessions.push(s);
      this.live.set(s.id, { rec, s });
    }
    this.tasks.set(req.task_id, rec);
    this.evict();
    rec.settled = Promise.all(rec.sessions.map((s) => s.handle!.result.then((r) => this.onResult(rec, s, r)))).then(() => this.finish(rec));
    rec.settled.catch((err: unknown) => this.deps.service.warn(`polar task ${req.task_id.slice(0, 100)}: ${(err as Error).message}`));
    this.bus.publish('task.created', { task_id: req.task_id, status: 'running', harness: req.agent.harness, model: req.agent.model_name, num_samples: req.num_samples });
    // Never rejects: persist logs a failed write itself.
    void this.persist(rec);
  }

  /** The task's status: live, or persisted by this or an earlier process; null when unknown. */
  async get(taskId: string): Promise<TaskStatus | null> {
    const rec = this.tasks.get(taskId);
    if (rec) return this.statusOf(rec);
    const stored = await this.store.load(taskId);
    if (!stored) return null;
    // A task that was running when its process died never finishes: the trainer resubmits.
    return stored.status.status === 'running' || stored.status.status === 'cancelling' ? { ...stored.status, status: 'failed' } : stored.status;
  }

  /**
   * Cancels a running task (its sessions cancelled, their sandboxes gone) and answers its
   * status; the id refuses a resubmit for 300 s. Unknown: null, or with `registerIfMissing`
   * a tombstone and `{status: "cancelled", total_sessions: 0}` (Polar's submit-ACK race).
   */
  async cancel(taskId: string, registerIfMissing: boolean): Promise<TaskStatus | null> {
    this.prune();
    const rec = this.tasks.get(taskId);
    if (!rec) {
      const stored = await this.get(taskId);
      if (stored) return stored;
      if (!registerIfMissing) return null;
      this.tombstones.set(taskId, this.clock.now() + TOMBSTONE_MS);
      return { task_id: taskId, status: 'cancelled', total_sessions: 0, completed_sessions: 0, results: [], result_paths: [] };
    }
    if (rec.status !== 'running') return this.statusOf(rec);
    rec.status = 'cancelling';
    rec.updatedAt = this.clock.now();
    this.tombstones.set(taskId, this.clock.now() + TOMBSTONE_MS);
    // A cancel of a rollout that ended meanwhile may reject: its result stands. `settled` is
    // logged where it is made; here it is only waited for.
    await Promise.all(rec.sessions.flatMap((s) => (s.result || !s.handle ? [] : [s.handle.cancel('cancelled by DELETE /rollout/task').catch(() => undefined)])));
    await rec.settled.catch(() => undefined);
    return this.statusOf(rec);
  }

  /** `GET /tasks`: summaries, newest first. */
  list(q: { status?: string | undefined; harness?: string | undefined; since?: number | undefined; limit: number }): Record<string, unknown>[] {
    const out: Record<string, unknown>[] = [];
    for (const rec of this.tasks.values()) {
      const row = this.summary(rec);
      if (q.status && row['status'] !== q.status) continue;
      if (q.harness && row['harness'] !== q.harness) continue;
      if (q.since !== undefined && (row['updated_at'] as number) < q.since) continue;
      out.push(row);
    }
    out.sort((a, b) => (b['updated_at'] as number) - (a['updated_at'] as number));
    return out.slice(0, q.limit);
  }

  /** `GET /tasks/{id}/sessions`, or null for an unknown task. */
  sessions(taskId: string): Record<string, unknown>[] | null {
    const rec = this.tasks.get(taskId);
    if (!rec) return null;
    return rec.sessions.map((s) => {
      const r = s.result;
      if (!r) return { session_id: s.id, task_id: taskId, status: s.state };
      const traces = r.trajectory.traces;
      return { session_id: r.session_id, task_id: taskId, status: r.status, node_id: r.node_id, reward: traces.length ? traces[traces.length - 1]!.reward : null, timing: r.timing, error: r.error };
    });
  }

  /** `GET /rollout/status`: each task's status, and the runtime's queue and stages (the route adds the nodes). */
  status(): Record<string, unknown> {
    const tasks: Record<string, TaskState> = {};
    for (const [id, rec] of this.tasks) tasks[id] = rec.status;
    const rt = this.deps.service.runtime;
    return { tasks, pipeline: rt ? rt.status() : { state: 'stopped' } };
  }

  /** Cancels every running task, stops their followers and callbacks, and waits for their records to be written. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.callbacks.abort();
    await Promise.all([...this.tasks.values()].filter((r) => r.status === 'running').map((r) => this.cancel(r.req.task_id, false)));
    // A task that finished just before keeps writing its record: the state dir is not ours after close.
    await this.store.flush();
    this.live.clear();
    this.unfollowIfIdle();
    this.bus.close();
  }

  // ───────────────────────────── internals ─────────────────────────────

  private runtime(): ServiceRuntime {
    const rt = this.deps.service.runtime;
    if (!rt || this.closed) throw new HttpError(503, 'STOPPED', 'the service is stopped; POST /start first');
    return rt;
  }

  private refuseDuplicate(taskId: string): void {
    this.prune();
    if (this.tombstones.has(taskId)) throw new HttpError(409, 'TASK_CANCELLED', `task ${taskId.slice(0, 200)} was cancelled before submission`);
    const st = this.tasks.get(taskId)?.status;
    if (st === 'running' || st === 'cancelling') throw new HttpError(409, 'TASK_RUNNING', `task ${taskId.slice(0, 200)} is already running`);
  }

  private prune(): void {
    const now = this.clock.now();
    for (const [id, at] of this.tombstones) if (at <= now) this.tombstones.delete(id);
  }

  private evict(): void {
    if (this.tasks.size <= MAX_RECORDS) return;
    for (const [id, rec] of this.tasks) {
      if (this.tasks.size <= MAX_RECORDS) break;
      if (rec.status !== 'running' && rec.status !== 'cancelling') this.tasks.delete(id);
    }
  }

  /**
   * One subscription to the runtime's events while any Polar session is live (none otherwise, so
   * Polar costs the runtime nothing when unused); each `rollout.state` is routed to its session
   * by id in O(1): live session statuses, the ready-queue time, the session and agent deadlines.
   */
  private follow(rt: ServiceRuntime): void {
    if (this.follower?.rt === rt) return;
    this.follower?.stop.abort();
    const stop = new AbortController();
    this.follower = { rt, stop };
    const events = rt.events({ signal: stop.signal, bufferSize: 100_000 });
    // Never rejects: the loop catches its stream's end.
    void (async () => {
      try {
        for await (const raw of events) {
          const ev = raw as { type: string; rolloutId?: string; state?: RolloutState; prev?: RolloutState | null };
          if (ev.type === 'rollout.state' && ev.rolloutId) this.onState(ev.rolloutId, ev.state!, ev.prev ?? null);
        }
      } catch {
        // The runtime closed: its sessions' results end them.
      }
    })();
  }

  private unfollowIfIdle(): void {
    if (this.live.size > 0 || !this.follower) return;
    this.follower.stop.abort();
    this.follower = null;
  }

  private onState(rolloutId: string, state: RolloutState, prev: RolloutState | null): void {
    const hit = this.live.get(rolloutId);
    if (!hit) return;
    const { rec, s } = hit;
    const st = LIVE_STATUS[state];
    if (st && st !== s.state) {
      s.state = st;
      this.bus.publish('session.state_changed', { task_id: rec.req.task_id, session_id: s.id, status: st });
    }
    const now = this.clock.now();
    // Polar's budget starts when the session enters INIT (a queued session is not timed).
    if (st && st !== 'REGISTERED' && s.initAt === null) {
      s.initAt = now;
      s.timers.push(this.clock.setTimeout(() => this.endSession(rec, s, 'task_timeout'), rec.req.timeout_seconds * 1000));
    }
    if (prev === 'initializing' && s.initEndAt === null) s.initEndAt = now;
    const agentTimeout = rec.req.metadata['agent_timeout'];
    if (st === 'RUNNING' && s.runAt === null) {
      s.runAt = now;
      if (typeof agentTimeout === 'number') s.timers.push(this.clock.setTimeout(() => this.endSession(rec, s, 'agent_timeout'), agentTimeout * 1000));
    }
  }

  /** Ends a live session for the Polar layer's own reason (its deadline, early stop). */
  private endSession(rec: TaskRec, s: SessionRec, why: Exclude<EndedBy, null>): void {
    if (s.result || s.endedBy !== null) return;
    s.endedBy = why;
    void s.handle?.cancel(`polar: ${why.replace('_', ' ')}`).catch(() => undefined);
  }

  private onResult(rec: TaskRec, s: SessionRec, r: import('../../protocol/trajectory.js').RolloutResult): void {
    for (const t of s.timers) this.clock.clearTimeout(t);
    s.timers = [];
    this.live.delete(s.id);
    this.unfollowIfIdle();
    const readyQueueMs = s.initEndAt !== null && s.runAt !== null ? Math.max(0, s.runAt - s.initEndAt) : 0;
    const result = toSessionResult(r, {
      sessionId: s.id,
      taskId: rec.req.task_id,
      builder: rec.req.builder.strategy,
      builderConfig: rec.req.builder.config,
      evaluator: (rec.req.evaluator?.strategy ?? null) as EvaluatorName | null,
      // In a `--redis` cluster, the worker that ran it (as `/nodes` lists it); a session no worker
      // ran (cancelled while queued) has none. On a single node, this node.
      nodeId: r.nodeId ?? (this.deps.service.runtime?.workerNodes ? null : this.deps.nodeId),
      // A cancel by DELETE is not ours to explain: the task says cancelled.
      endedBy: r.outcome === 'cancelled' || r.outcome === 'timed-out' ? s.endedBy : null,
      taskMetadata: rec.req.metadata,
      image: rec.image,
      readyQueueMs,
      now: () => this.clock.now(),
    });
    s.result = result;
    s.state = result.status;
    rec.results.push(result);
    rec.updatedAt = this.clock.now();
    this.bus.publish('session.state_changed', { task_id: rec.req.task_id, session_id: s.id, status: result.status });
    this.bus.publish('task.updated', { task_id: rec.req.task_id, completed_sessions: rec.results.length, total_sessions: rec.sessions.length });
    const need = rec.req.early_stop_min_usable_sessions;
    if (need !== null && rec.status === 'running' && rec.results.filter(isUsable).length >= need) {
      for (const x of rec.sessions) this.endSession(rec, x, 'early_stop');
    }
  }

  private async finish(rec: TaskRec): Promise<void> {
    // Polar's `TaskResult.results` are in session order.
    rec.results = rec.sessions.map((s) => s.result!);
    rec.status = rec.status === 'running' ? 'completed' : 'cancelled';
    rec.updatedAt = this.clock.now();
    const st = this.statusOf(rec);
    this.bus.publish('task.completed', { task_id: rec.req.task_id, status: rec.status, completed_sessions: rec.results.length });
    await this.persist(rec);
    const url = rec.req.callback_url;
    if (url && rec.status === 'completed' && !this.closed) {
      const report = await postCallback(url, st, { clock: this.clock, signal: this.callbacks.signal, fetch: this.deps.fetch });
      if (!report.delivered) this.deps.service.warn(`polar task ${rec.req.task_id.slice(0, 100)}: callback not delivered after ${report.attempts} attempts (${String(report.last).slice(0, 200)}); the result stays pollable at GET /rollout/task/{id}`);
    }
  }

  private statusOf(rec: TaskRec): TaskStatus {
    const done = rec.sessions.filter((s) => s.result);
    return {
      task_id: rec.req.task_id,
      status: rec.status,
      total_sessions: rec.sessions.length,
      completed_sessions: done.length,
      results: rec.status === 'completed' || rec.status === 'cancelled' ? rec.results : done.map((s) => s.result!),
      result_paths: [],
    };
  }

  private summary(rec: TaskRec): Record<string, unknown> {
    const results = rec.results;
    const rewards = results.map((r) => r.trajectory.traces.at(-1)?.reward).filter((x): x is number => typeof x === 'number');
    const mean = (xs: number[]): number | null => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);
    return {
      task_id: rec.req.task_id,
      status: rec.status,
      harness: rec.req.agent.harness,
      model: rec.req.agent.model_name,
      num_samples: rec.sessions.length,
      completed_sessions: results.length,
      errored_sessions: results.filter((r) => r.status !== 'COMPLETED').length,
      mean_reward: mean(rewards),
      mean_traces: mean(results.map((r) => r.trajectory.traces.length)),
      mean_completions: mean(results.map((r) => Number(r.trajectory.metadata['record_count'] ?? 0))),
      created_at: rec.createdAt / 1000,
      updated_at: rec.updatedAt / 1000,
      source: 'live',
    };
  }

  private async persist(rec: TaskRec): Promise<void> {
    const stored: StoredTask = { status: this.statusOf(rec), harness: rec.req.agent.harness, model: rec.req.agent.model_name, created_at: rec.createdAt / 1000, updated_at: rec.updatedAt / 1000 };
    try {
      await this.store.save(stored);
    } catch (err) {
      this.deps.service.warn(`polar task ${rec.req.task_id.slice(0, 100)}: could not persist its record: ${(err as Error).message}`);
    }
  }
}
