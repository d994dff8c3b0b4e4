import { every, type Clock } from '../clock.js';

/** What the operational log reads from the service at each look. */
export interface OpsSnapshot {
  /** Rollouts finished since the runtime started, and their outcomes. */
  completed: number;
  outcomes: Readonly<Record<string, number>>;
  /** Rollouts in a stage now, and admitted ones waiting for a stage or a worker. */
  live: number;
  queued: number;
  /** Backends by id, with whether each answers (`healthy`) now. */
  backends: readonly { id: string; up: boolean; why?: string | undefined }[];
  /** Cluster workers heard from now (a gateway); absent on a single process. */
  workers?: readonly string[] | undefined;
}

/** Options of {@link OpsLog}. */
export interface OpsLogOptions {
  /** The service's state now; null while no runtime runs (stopped). */
  source: () => OpsSnapshot | null;
  /** One line, without its newline. */
  write: (line: string) => void;
  /** `text` for people, `json` (one object a line) for log shippers. */
  format: 'text' | 'json';
  clock: Clock;
  /** Between stats lines while work flows. Default 10 s. */
  statsMs?: number | undefined;
  /** Between looks for a backend or worker going up or down. Default 1 s. */
  watchMs?: number | undefined;
}

/**
 * The operational log of `rollout serve` and `rollout worker` (#30): a stats line every 10 s
 * while work flows (rollouts/s, outcomes since the last line, live, queue depth, backends up of
 * all) and one line as soon as a backend or a worker goes up or down. Silent while idle, so a
 * quiet service writes nothing. It reads the service through `source` only: nothing on the
 * rollouts' path knows it exists, and it costs one `status()` a second.
 */
export class OpsLog {
  private last: OpsSnapshot | null = null;
  private lastAt: number;
  private backends = new Map<string, boolean>();
  private workers: Set<string> | null = null;
  private stops: (() => void)[] = [];

  constructor(private readonly opts: OpsLogOptions) {
    this.lastAt = opts.clock.now();
  }

  /** Starts both periods. Idempotent until {@link stop}. */
  start(): void {
    if (this.stops.length > 0) return;
    this.watch();
    this.stops.push(every(this.opts.clock, this.opts.watchMs ?? 1000, () => this.watch()));
    this.stops.push(every(this.opts.clock, this.opts.statsMs ?? 10_000, () => this.stats()));
  }

  stop(): void {
    for (const s of this.stops.splice(0)) s();
  }

  /** Compares backends and workers with the last look and writes a line per change. */
  watch(): void {
    const snap = this.opts.source();
    if (!snap) return;
    const seen = new Set<string>();
    for (const b of snap.backends) {
      seen.add(b.id);
      const was = this.backends.get(b.id);
      if (was !== b.up) {
        // A backend registered healthy at start-up is not news; one that starts down is.
        if (was !== undefined || !b.up) this.event({ event: b.up ? 'backend.up' : 'backend.down', backend: b.id, ...(b.why ? { why: b.why } : {}) }, `backend ${b.id} ${b.up ? 'up' : `down${b.why ? `: ${b.why}` : ''}`}`);
        this.backends.set(b.id, b.up);
      }
    }
    for (const id of [...this.backends.keys()]) {
      if (seen.has(id)) continue;
      this.backends.delete(id);
      this.event({ event: 'backend.removed', backend: id }, `backend ${id} removed`);
    }
    if (snap.workers) {
      const now = new Set(snap.workers);
      if (this.workers) {
        for (const w of now) if (!this.workers.has(w)) this.event({ event: 'worker.up', worker: w }, `worker ${w} up (${now.size} live)`);
        for (const w of this.workers) if (!now.has(w)) this.event({ event: 'worker.down', worker: w }, `worker ${w} down (${now.size} live)`);
      }
      this.workers = now;
    }
  }

  /** Writes the stats line when rollouts finished or ran since the last one. */
  stats(): void {
    const snap = this.opts.source();
    const now = this.opts.clock.now();
    if (!snap) return;
    const prev = this.last;
    this.last = snap;
    const seconds = Math.max(0.001, (now - this.lastAt) / 1000);
    this.lastAt = now;
    // A restarted runtime (ProRL /stop then /start) counts from zero again.
    const base = prev && prev.completed <= snap.completed ? prev : null;
    const done = snap.completed - (base?.completed ?? 0);
    if (done === 0 && snap.live === 0 && snap.queued === 0) return;
    const outcomes: Record<string, number> = {};
    for (const [k, v] of Object.entries(snap.outcomes)) {
      const d = v - (base?.outcomes[k] ?? 0);
      if (d > 0) outcomes[k] = d;
    }
    const up = snap.backends.filter((b) => b.up).length;
    const rate = done / seconds;
    const record = {
      event: 'stats',
      rollouts_per_s: Number(rate.toFixed(2)),
      finished: done,
      outcomes,
      live: snap.live,
      queued: snap.queued,
      backends_up: up,
      backends: snap.backends.length,
      ...(snap.workers ? { workers: snap.workers.length } : {}),
    };
    const oc = Object.entries(outcomes).map(([k, v]) => `${k} ${v}`).join(', ') || 'none';
    const text = `${rate.toFixed(2)} rollouts/s, ${done} finished (${oc}), ${snap.live} live, ${snap.queued} queued, backends ${up}/${snap.backends.length} up${snap.workers ? `, ${snap.workers.length} workers` : ''}`;
    this.event(record, text);
  }

  private event(record: Record<string, unknown>, text: string): void {
    const at = new Date(this.opts.clock.now()).toISOString();
    this.opts.write(this.opts.format === 'json' ? JSON.stringify({ time: at, ...record }) : `${at} ${text}`);
  }
}

/** The runtime parts the operational log reads (an embedded runtime, a gateway's, a worker's). */
export interface OpsRuntime {
  status(): { completed: number; outcomes: Record<string, number>; live: number; queued: number; stages: Record<'init' | 'run' | 'eval', { waiting: number }> };
  listBackends?(): readonly { id: string; state: string; failures: number }[];
  /** A cluster gateway's live workers. */
  workerIds?(): readonly string[];
}

/**
 * The snapshot of whatever runtime `current()` returns now (null while none runs): queue depth
 * is the admission queue plus those waiting for a stage slot; a backend is down while `degraded`.
 */
export function opsSnapshotOf(current: () => OpsRuntime | null): () => OpsSnapshot | null {
  return () => {
    const rt = current();
    if (!rt) return null;
    const st = rt.status();
    const waiting = st.stages.init.waiting + st.stages.run.waiting + st.stages.eval.waiting;
    return {
      completed: st.completed,
      outcomes: st.outcomes,
      live: st.live,
      queued: st.queued + waiting,
      backends: (rt.listBackends?.() ?? []).filter((b) => b.state !== 'removed').map((b) => ({ id: b.id, up: b.state !== 'degraded', ...(b.state === 'degraded' && b.failures > 0 ? { why: `${b.failures} failed calls` } : {}) })),
      ...(rt.workerIds ? { workers: rt.workerIds() } : {}),
    };
  };
}
