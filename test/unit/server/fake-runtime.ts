import { ValidationError, RuntimeClosedError } from '../../../src/errors.js';
import { InstanceSchema } from '../../../src/protocol/instance.js';
import type { RolloutEvent, RolloutEventInput, RolloutState } from '../../../src/protocol/events.js';
import type { Outcome, RolloutResult } from '../../../src/protocol/trajectory.js';
import type { EventsOptions, GroupHandle, RolloutHandle, RolloutSummary, RuntimeStatus } from '../../../src/runtime/runtime-api.js';
import type { BackendInfo, BackendSpec } from '../../../src/llm/llm-client.js';
import type { ServiceRuntime } from '../../../src/server/service-runtime.js';

type Item = RolloutEvent | { type: 'gap'; from: number; to: number };

/** What a test puts in `instance.fake` to steer the fake rollout. */
interface FakeSpec {
  outcome?: Outcome;
  stage?: 'init' | 'run' | 'eval';
  /** Stay live until cancelled or `finish()`ed. */
  hold?: boolean;
  reward?: number;
  patch?: string;
}

interface Rec {
  summary: RolloutSummary;
  resolve: (r: RolloutResult) => void;
  promise: Promise<RolloutResult>;
  spec: FakeSpec;
}

/**
 * An in-test Runtime: real event sequencing, retention, per-subscriber buffers and gaps, but
 * rollouts that end as `instance.fake` says (on the next macrotask, or when cancelled / finished).
 */
export class FakeRuntime implements ServiceRuntime {
  private seq = 0;
  private readonly retained: RolloutEvent[] = [];
  private readonly subs = new Set<{ push(e: RolloutEvent): void; filter(e: RolloutEvent): boolean }>();
  private readonly recs = new Map<string, Rec>();
  private readonly backends = new Map<string, BackendInfo>();
  private n = 0;
  state: RuntimeStatus['state'] = 'running';
  closedWith: { drain?: boolean } | null = null;

  constructor(
    private readonly retention = 1000,
    private readonly known: readonly string[] = ['math', 'shell'],
  ) {}

  dataSources(): readonly string[] {
    return this.known;
  }

  /** Emits an event as the real runtime would (for tests that only need a stream). */
  emit(input: RolloutEventInput, rseq = 1): RolloutEvent {
    const ev = { ...input, seq: ++this.seq, rseq, ts: 1_000 + this.seq } as RolloutEvent;
    this.retained.push(ev);
    if (this.retained.length > this.retention) this.retained.shift();
    for (const s of this.subs) if (s.filter(ev)) s.push(ev);
    return ev;
  }

  submit(instance: unknown, _sampling?: unknown, opts: { id?: string; groupId?: string } = {}): RolloutHandle {
    if (this.state !== 'running') throw new RuntimeClosedError();
    const p = InstanceSchema.safeParse(instance);
    if (!p.success) throw new ValidationError('invalid instance', p.error.issues.map((i) => ({ path: i.path.join('.'), message: i.message })));
    const id = opts.id ?? `r-${++this.n}`;
    if (this.recs.has(id) && !this.recs.get(id)!.summary.result) throw new ValidationError(`duplicate id ${id}`, [{ path: 'id', message: 'in use' }]);
    const inst = p.data as Record<string, unknown>;
    const spec = (inst['fake'] ?? {}) as FakeSpec;
    let resolve!: (r: RolloutResult) => void;
    const promise = new Promise<RolloutResult>((res) => (resolve = res));
    const summary: RolloutSummary = {
      id,
      instanceId: p.data.instance_id ?? null,
      groupId: opts.groupId ?? null,
      trajectoryId: p.data.trajectory_id ?? null,
      dataSource: p.data.data_source,
      state: 'queued',
      turn: 0,
      tokens: 0,
      attempt: 1,
      submittedAt: 0,
      result: null,
    };
    this.recs.set(id, { summary, resolve, promise, spec });
    this.emit({ type: 'rollout.submitted', rolloutId: id, instanceId: summary.instanceId, trajectoryId: summary.trajectoryId, groupId: summary.groupId, dataSource: summary.dataSource, attempt: 1 });
    if (!spec.hold) setImmediate(() => this.finish(id, spec.outcome ?? 'completed'));
    return { id, result: promise, cancel: async () => void (await this.cancel(id)) };
  }

  submitGroup(instance: unknown, sampling: unknown, n: number, opts: { groupId?: string } = {}): GroupHandle {
    const groupId = opts.groupId ?? `g-${++this.n}`;
    const rollouts = Array.from({ length: n }, (_, i) => this.submit({ ...(instance as object), trajectory_id: String(i) }, sampling, { groupId }));
    return { groupId, rollouts, results: Promise.all(rollouts.map((r) => r.result)), cancel: async () => void (await Promise.all(rollouts.map((r) => r.cancel()))) };
  }

  /** Ends a live rollout with `outcome`. */
  finish(id: string, outcome: Outcome): void {
    const rec = this.recs.get(id);
    if (!rec || rec.summary.result) return;
    const trainable = outcome === 'completed' || outcome === 'truncated';
    const stage = rec.spec.stage;
    const result: RolloutResult = {
      id,
      instanceId: rec.summary.instanceId,
      trajectoryId: rec.summary.trajectoryId,
      groupId: rec.summary.groupId,
      dataSource: rec.summary.dataSource,
      outcome,
      finish: trainable ? 'finish_tool' : outcome === 'cancelled' ? 'cancelled' : 'error',
      reward: trainable ? (rec.spec.reward ?? 1) : null,
      resolved: trainable && (rec.spec.reward ?? 1) > 0,
      evalDetails: rec.spec.patch ? { git_patch: rec.spec.patch } : null,
      error: trainable ? null : { name: outcome === 'cancelled' ? 'CancelledError' : 'InfraError', code: 'X', message: outcome, retryable: false, ...(stage ? { stage } : {}) },
      attempts: 1,
      trajectory: {
        turns: [],
        tokens: [1, 2, 3, 4],
        lossMask: [0, 0, 1, 1],
        logprobs: [0, 0, -0.5, -0.25],
        messages: [
          { role: 'user', content: 'q', token_ids: [1, 2] },
          { role: 'assistant', content: 'a', input_ids: [1, 2], token_ids: [3, 4], logprobs: [-0.5, -0.25] },
        ],
        tools: [],
        diagnostics: { drift: [] },
      },
      timing: { queueMs: 100, initMs: 1000, runMs: 2000, evalMs: 500, countedMs: 3500, wallMs: 4000, timeoutTriggered: outcome === 'timed-out' },
    };
    const final: RolloutState = outcome === 'cancelled' ? 'cancelled' : outcome === 'timed-out' ? 'timedOut' : trainable ? 'done' : 'failed';
    this.emit({ type: 'rollout.state', rolloutId: id, state: final, prev: rec.summary.state, turn: 0 }, 2);
    rec.summary.state = final;
    rec.summary.result = result;
    this.emit({ type: 'rollout.result', rolloutId: id, outcome, finish: result.finish, reward: result.reward, resolved: result.resolved, error: result.error, timing: result.timing, tokens: 4, turns: 1 }, 3);
    rec.resolve(result);
  }

  async cancel(id: string): Promise<boolean> {
    const rec = this.recs.get(id);
    if (!rec || rec.summary.result) return false;
    this.finish(id, 'cancelled');
    return true;
  }

  get(id: string): RolloutSummary | undefined {
    return this.recs.get(id)?.summary;
  }

  list(filter: { state?: RolloutState; groupId?: string; outcome?: string } = {}): RolloutSummary[] {
    return [...this.recs.values()]
      .map((r) => r.summary)
      .filter((s) => (!filter.state || s.state === filter.state) && (!filter.groupId || s.groupId === filter.groupId) && (!filter.outcome || s.result?.outcome === filter.outcome));
  }

  live(): number {
    return [...this.recs.values()].filter((r) => !r.summary.result).length;
  }

  events(opts: EventsOptions = {}): AsyncIterable<Item> {
    const self = this;
    const bufferSize = opts.bufferSize ?? 1000;
    const filter = (e: RolloutEvent): boolean => {
      if (opts.rolloutId && e.rolloutId !== opts.rolloutId) return false;
      if (opts.groupId && self.recs.get(e.rolloutId)?.summary.groupId !== opts.groupId) return false;
      return true;
    };
    return {
      [Symbol.asyncIterator](): AsyncIterator<Item> {
        const queue: Item[] = [];
        let wake: (() => void) | null = null;
        let done = false;
        if (opts.after !== undefined) {
          const oldest = self.retained[0]?.seq ?? self.seq + 1;
          if (opts.after + 1 < oldest) queue.push({ type: 'gap', from: opts.after + 1, to: oldest - 1 });
          for (const e of self.retained) if (e.seq > opts.after && filter(e)) queue.push(e);
        }
        const sub = {
          filter,
          push(e: RolloutEvent) {
            if (queue.length >= bufferSize) {
              const dropped = queue.shift()!;
              const from = dropped.type === 'gap' ? dropped.from : dropped.seq;
              queue.unshift({ type: 'gap', from, to: from });
            }
            queue.push(e);
            wake?.();
          },
        };
        self.subs.add(sub);
        const end = (): void => {
          done = true;
          self.subs.delete(sub);
          wake?.();
        };
        opts.signal?.addEventListener('abort', end, { once: true });
        self.closers.add(end);
        return {
          async next() {
            for (;;) {
              if (queue.length) return { value: queue.shift()!, done: false };
              if (done) return { value: undefined, done: true };
              await new Promise<void>((r) => (wake = r));
              wake = null;
            }
          },
          async return() {
            end();
            return { value: undefined, done: true };
          },
        };
      },
    };
  }

  private readonly closers = new Set<() => void>();

  status(): RuntimeStatus {
    const live = this.live();
    return {
      state: this.state,
      queued: live,
      stages: { init: { active: 0, waiting: 0, limit: 64 }, run: { active: 0, waiting: 0, limit: 64 }, eval: { active: 0, waiting: 0, limit: 64 } },
      live,
      completed: this.recs.size - live,
      stuckCloses: 0,
      outcomes: {},
    };
  }

  async close(opts: { drain?: boolean } = {}): Promise<void> {
    this.closedWith = opts;
    this.state = 'closed';
    for (const r of this.recs.values()) if (!r.summary.result) this.finish(r.summary.id, 'cancelled');
    for (const c of this.closers) c();
  }

  addBackend(spec: BackendSpec): BackendInfo {
    const id = spec.id ?? spec.url;
    const info: BackendInfo = { id, url: spec.url, protocol: spec.protocol, state: 'healthy', inFlight: 0, served: 0, failures: 0, weightVersion: spec.weightVersion ?? null, latencyMs: null };
    this.backends.set(id, info);
    return info;
  }
  drainBackend(id: string): boolean {
    const b = this.backends.get(id);
    if (b) b.state = 'draining';
    return !!b;
  }
  removeBackend(id: string): boolean {
    return this.backends.delete(id);
  }
  listBackends(): BackendInfo[] {
    return [...this.backends.values()];
  }
}
