import { randomUUID } from 'node:crypto';
import { CancelledError, RolloutError, ValidationError, toRolloutError } from '../errors.js';
import { memberSeed } from '../llm/member-seed.js';
import type { WeightVersion } from '../llm/weight-versions.js';
import { RolloutBufferOptionsSchema, type RolloutBufferOptions, type RolloutBufferOptionsInput } from '../protocol/buffer.js';
import type { Instance, SamplingParams } from '../protocol/instance.js';
import type { RolloutResult } from '../protocol/trajectory.js';
import { systemClock, type Clock } from '../clock.js';
import { LeaseTable } from './buffer-leases.js';
import { allRewardsEqual, groupStaleness, groupVersion, pickNext } from './buffer-policy.js';
import type { BufferedGroup, BufferEvent, BufferLease, LeaseOutcome, RolloutBufferStats } from './buffer-types.js';
import type { RolloutHandle, Runtime } from './runtime-api.js';
import { validateSubmission, zodToValidation } from './submission.js';

export type { BufferedGroup, BufferEvent, BufferLease, LeaseOutcome, RolloutBufferStats } from './buffer-types.js';


interface Prompt {
  instance: Instance;
  sampling: SamplingParams;
}

interface RunningGroup {
  groupId: string;
  instanceId: string | null;
  members: { h: RolloutHandle; done: boolean }[];
  kept: RolloutResult[];
  finished: number;
  settled: boolean;
  stopped: boolean;
  cancelled: number;
}

/**
 * A buffer of GRPO groups for asynchronous trainers (Tinker's buffer of groups, AReaL's
 * rollout queue). The trainer adds prompts; the buffer keeps up to `groups` (B) groups at once —
 * running, or completed and not yet taken, so it never runs more than B groups ahead of the
 * trainer — and hands out complete groups as they finish, in completion order or oldest weight
 * version first.
 *
 * - **Over-provisioning**: each group starts n + k members; the first n to finish are kept and
 *   the others are cancelled at once (their sandboxes closed before the group is handed out).
 * - **Early stop**: {@link stopGroup} cancels a group's members still running and hands out what
 *   finished.
 * - **Dynamic sampling** (DAPO): a group whose rewards are all equal is dropped, counted, and its
 *   place is given to the next prompt at once.
 * - **Leases** (at-least-once delivery): {@link lease} hands groups out without letting go of
 *   them; each stays the holder's, keeping its place in B, until {@link ack}ed. Released by the
 *   holder, or when its lease time runs out, it goes back in line (by `seq`, as if never taken)
 *   and is handed out again with `deliveries` one higher. {@link take} / {@link next} hand
 *   out for good (at most once).
 *
 * The buffer sees the runtime only through `submit`, so it works on an embedded runtime and on
 * the service's (the `/v1/buffers` routes). Nothing is timed but lease expiry (on the clock).
 */
export class RolloutBuffer {
  readonly id: string;
  readonly options: RolloutBufferOptions;
  private readonly queue: Prompt[] = [];
  private readonly running = new Map<string, RunningGroup>();
  private readonly ready: BufferedGroup[] = [];
  /** Groups handed out on a lease, until acked, released or expired. */
  private readonly leases: LeaseTable;
  private readonly waiters = new Set<() => void>();
  private readonly listeners = new Set<(e: BufferEvent) => void>();
  private ended = false;
  private closed = false;
  /** A submit refused while nothing ran: `next()` rejects with it rather than wait forever. */
  private stall: RolloutError | null = null;
  private seq = 0;
  private counts = { started: 0, delivered: 0, returned: 0, dropped: 0, stale: 0, stopped: 0, cancelledMembers: 0 };
  private readonly trainerVersion: () => WeightVersion | null;
  private readonly defaultSampling: unknown;

  /** Throws ValidationError naming the bad option. */
  constructor(
    private readonly rt: Pick<Runtime, 'submit'>,
    input: RolloutBufferOptionsInput,
    opts: { id?: string; sampling?: unknown; trainerVersion?: () => WeightVersion | null; clock?: Clock } = {},
  ) {
    const o = RolloutBufferOptionsSchema.safeParse(input);
    if (!o.success) throw zodToValidation('buffer', o.error.issues);
    this.options = Object.freeze(o.data);
    this.id = opts.id ?? `buf-${randomUUID()}`;
    this.defaultSampling = opts.sampling ?? {};
    this.trainerVersion = opts.trainerVersion ?? (() => null);
    this.leases = new LeaseTable(opts.clock ?? systemClock, (leaseId) => this.giveBack(leaseId, 'expired'));
  }

  /**
   * Queues prompts (each becomes one group) and starts groups up to B. Validates every instance
   * first and adds none when one is bad (ValidationError naming `instances.<i>`).
   */
  add(instances: readonly unknown[], sampling?: unknown): void {
    if (this.closed) throw new CancelledError('the buffer is closed');
    if (this.ended) throw new ValidationError('no prompts may be added after end(): the buffer was told none follow', [{ path: 'instances', message: 'no prompts may be added after end' }]);
    const prompts = instances.map((inst, i) => {
      try {
        return validateSubmission(inst, sampling ?? this.defaultSampling);
      } catch (e) {
        if (!(e instanceof ValidationError)) throw e;
        const issues = (e.details?.issues as { path: string; message: string }[] | undefined) ?? [];
        throw new ValidationError(`instances.${i}: ${e.message}`, issues.map((x) => ({ ...x, path: `instances.${i}.${x.path}` })));
      }
    });
    this.queue.push(...prompts);
    this.fill();
  }

  /** No more prompts: once the queued ones are consumed, `next()` answers null. */
  end(): void {
    this.ended = true;
    this.wake();
  }

  /**
   * The next completed group, waiting for one; null once the buffer is closed, or ended with
   * nothing left to run. Rejects with the runtime's error when a group could not start and none
   * is running (a full queue, a closed runtime), and with CancelledError when `signal` aborts.
   */
  async next(signal?: AbortSignal): Promise<BufferedGroup | null> {
    const [g] = await this.take(1, signal);
    return g ?? null;
  }

  /** Up to `max` completed groups: waits for the first (see {@link next}), then takes what else is ready. */
  take(max: number, signal?: AbortSignal): Promise<BufferedGroup[]> {
    return this.handOut(max, signal, (g) => this.delivered(g, null));
  }

  /**
   * Up to `max` completed groups on a lease: waits for the first as {@link take} does, but the
   * groups stay held — counted in `leased`, keeping their places in B — until {@link ack}ed. A
   * lease {@link release}d, or unacked after `leaseMs` (when given), puts its group back in line
   * to be handed out again (`deliveries` + 1, a new lease id).
   * @throws ValidationError naming `leaseMs` when it is not a positive whole number of ms.
   */
  async lease(max: number, opts: { leaseMs?: number | undefined; signal?: AbortSignal | undefined } = {}): Promise<BufferLease[]> {
    const { leaseMs } = opts;
    if (leaseMs !== undefined && !(Number.isInteger(leaseMs) && leaseMs > 0)) {
      throw new ValidationError(`leaseMs must be a positive whole number of milliseconds, got ${leaseMs}`, [{ path: 'leaseMs', message: 'a positive integer (ms)' }]);
    }
    return this.handOut(max, opts.signal, (g) => ({ leaseId: this.leases.hold(g, leaseMs), group: g }));
  }

  /** Acks leases: their groups are delivered for good (counted in `delivered`) and their places in B go to the next prompts. */
  ack(leaseIds: readonly string[]): LeaseOutcome {
    const out: LeaseOutcome = { done: [], unknown: [] };
    for (const id of leaseIds) {
      const group = this.leases.end(id);
      if (!group) {
        out.unknown.push(id);
        continue;
      }
      this.delivered(group, id);
      out.done.push(id);
    }
    if (out.done.length > 0) {
      this.fill();
      // The last ack may leave an ended buffer done: waiting `next()`s answer null.
      this.wake();
    }
    return out;
  }

  /** Gives leases back unacked: their groups go back in line, to be handed out again. */
  release(leaseIds: readonly string[]): LeaseOutcome {
    const out: LeaseOutcome = { done: [], unknown: [] };
    for (const id of leaseIds) (this.giveBack(id, 'released') ? out.done : out.unknown).push(id);
    return out;
  }

  /** Waits for a group (see {@link next}), then takes up to `max` of those ready, each through `each`; then fills B. */
  private async handOut<T>(max: number, signal: AbortSignal | undefined, each: (g: BufferedGroup) => T): Promise<T[]> {
    const out: T[] = [];
    for (let g = await this.pop(signal); g; g = out.length < max ? this.popReady() : null) out.push(each(g));
    this.fill();
    return out;
  }

  /** Counts `group` as handed out for good (taken, or its lease acked) and answers it. */
  private delivered(group: BufferedGroup, leaseId: string | null): BufferedGroup {
    this.counts.delivered++;
    this.emit({ type: 'group.delivered', group, leaseId });
    return group;
  }

  /** A leased group back in line; false when `leaseId` is not held. */
  private giveBack(leaseId: string, reason: 'released' | 'expired'): boolean {
    const group = this.leases.end(leaseId);
    if (!group) return false;
    if (this.closed) return true;
    this.counts.returned++;
    // A copy: the holder's object keeps the `deliveries` it was handed with.
    this.ready.push({ ...group });
    this.emit({ type: 'group.returned', groupId: group.groupId, leaseId, reason });
    this.wake();
    return true;
  }

  /**
   * The ready group to hand out next, out of line and counted as handed out (a copy, with its
   * `deliveries`); ready groups staler than `maxStaleness` are dropped on the way. Null when
   * none is ready.
   */
  private popReady(): BufferedGroup | null {
    for (;;) {
      const g = pickNext(this.ready, this.options.order);
      if (!g) return null;
      this.ready.splice(this.ready.indexOf(g), 1);
      if (this.tooStale(g)) {
        this.counts.stale++;
        this.emit({ type: 'group.dropped', groupId: g.groupId, instanceId: g.instanceId, reward: g.rewards[0] ?? null, reason: 'stale' });
        this.fill();
        continue;
      }
      return { ...g, deliveries: g.deliveries + 1 };
    }
  }

  /** {@link popReady}, waiting for a group as {@link next} does. The caller fills B after its bookkeeping. */
  private async pop(signal?: AbortSignal): Promise<BufferedGroup | null> {
    for (;;) {
      const g = this.popReady();
      if (g) return g;
      if (this.closed || this.isDone()) return null;
      if (this.stall && this.running.size === 0) throw this.stall;
      if (signal?.aborted) throw new CancelledError('wait for a group aborted');
      await new Promise<void>((resolve, reject) => {
        const onAbort = () => {
          this.waiters.delete(wake);
          reject(new CancelledError('wait for a group aborted'));
        };
        const wake = () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        };
        this.waiters.add(wake);
        signal?.addEventListener('abort', onAbort, { once: true });
      });
    }
  }

  /** Groups as they complete, until the buffer is done or closed. */
  async *[Symbol.asyncIterator](): AsyncIterator<BufferedGroup> {
    for (let g = await this.next(); g; g = await this.next()) yield g;
  }

  /**
   * Stops a running group early: its members still running are cancelled (sandboxes closed) and
   * the group is handed out with what finished (`stopped: true`; dropped when nothing finished).
   * False when no such running group.
   */
  async stopGroup(groupId: string, reason = 'group stopped early'): Promise<boolean> {
    const g = this.running.get(groupId);
    if (!g || g.settled) return false;
    g.stopped = true;
    g.settled = true;
    this.counts.stopped++;
    await this.cancelRest(g, reason);
    this.finalize(g);
    return true;
  }

  /** Listens to groups completing and being dropped (for streaming); returns the unsubscribe. A throwing listener is ignored. */
  onEvent(fn: (e: BufferEvent) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  stats(): RolloutBufferStats {
    return { queuedPrompts: this.queue.length, inFlight: this.running.size, ready: this.ready.length, leased: this.leases.size, ...this.counts, ended: this.ended, done: this.isDone() };
  }

  /** Cancels every running member (resolves once their sandboxes are closed); `next()` answers null from then on. */
  async close(reason = 'buffer closed'): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.queue.length = 0;
    this.leases.clear();
    const groups = [...this.running.values()];
    for (const g of groups) g.settled = true;
    await Promise.all(groups.map((g) => this.cancelRest(g, reason)));
    this.running.clear();
    this.wake();
  }

  /** Staler than `maxStaleness` against the trainer's version now (numeric versions only). */
  private tooStale(g: BufferedGroup): boolean {
    const bound = this.options.maxStaleness;
    const t = this.trainerVersion();
    const v = g.minWeightVersion;
    return bound !== undefined && typeof t === 'number' && typeof v === 'number' && t - v > bound;
  }

  private isDone(): boolean {
    return this.ended && this.queue.length === 0 && this.running.size === 0 && this.ready.length === 0 && this.leases.size === 0;
  }

  /** Starts groups while there is room (running + ready + leased < B) and a prompt. */
  private fill(): void {
    while (!this.closed && this.queue.length > 0 && this.running.size + this.ready.length + this.leases.size < this.options.groups) {
      if (!this.start(this.queue[0]!)) return;
      this.queue.shift();
    }
  }

  /** Starts one group; false (nothing left running of it) when the runtime refuses a member. */
  private start(p: Prompt): boolean {
    const total = this.options.n + this.options.overProvision;
    const g: RunningGroup = { groupId: `${this.id}-g${this.counts.started + 1}`, instanceId: p.instance.instance_id ?? null, members: [], kept: [], finished: 0, settled: false, stopped: false, cancelled: 0 };
    try {
      for (let i = 0; i < total; i++) {
        // One prompt seed, distinct member seeds (identical members would have zero advantage).
        const sampling = p.sampling.seed === undefined ? p.sampling : { ...p.sampling, seed: memberSeed(p.sampling.seed, i) };
        g.members.push({ done: false, h: this.rt.submit({ ...p.instance, trajectory_id: String(i) }, sampling, { groupId: g.groupId }) });
      }
    } catch (err) {
      // All or nothing, as submitGroup: withdraw what was admitted and retry when a group ends.
      g.settled = true;
      for (const m of g.members) void m.h.cancel('buffer could not start the whole group').catch(() => undefined); // ends reach onResult
      this.stall = toRolloutError(err);
      this.wake();
      return false;
    }
    this.stall = null;
    this.counts.started++;
    this.running.set(g.groupId, g);
    for (const m of g.members) void m.h.result.then((r) => this.onResult(g, m, r), () => undefined); // rejects only when the runtime (and so this buffer) closes
    return true;
  }

  private onResult(g: RunningGroup, m: RunningGroup['members'][number], r: RolloutResult): void {
    m.done = true;
    g.finished++;
    if (g.settled) return;
    // A member cancelled from outside (not by us) is not a finish; the others may still make n.
    if (r.outcome !== 'cancelled') g.kept.push(r);
    if (g.kept.length >= this.options.n) {
      g.settled = true;
      void this.cancelRest(g, 'over-provisioned: the group has its n').then(() => this.finalize(g));
    } else if (g.finished === g.members.length) {
      g.settled = true;
      this.finalize(g);
    }
  }

  /** Cancels the members of `g` that have not finished; resolves once they have ended (sandboxes closed). */
  private async cancelRest(g: RunningGroup, reason: string): Promise<void> {
    const rest = g.members.filter((m) => !m.done);
    g.cancelled += rest.length;
    this.counts.cancelledMembers += rest.length;
    await Promise.all(rest.map((m) => m.h.cancel(reason).catch(() => undefined))); // ends reach onResult
  }

  /** Hands a settled group out, or drops it (dynamic sampling, or nothing kept) and starts the next prompt. */
  private finalize(g: RunningGroup): void {
    if (!this.running.delete(g.groupId) || this.closed) return;
    const results = g.kept.slice(0, this.options.n).sort((a, b) => Number(a.trajectoryId) - Number(b.trajectoryId));
    const rewards = results.map((r) => r.reward);
    if (results.length === 0 || (this.options.dynamicSampling && allRewardsEqual(rewards))) {
      if (results.length > 0) this.counts.dropped++;
      this.emit({ type: 'group.dropped', groupId: g.groupId, instanceId: g.instanceId, reward: rewards[0] ?? null, reason: results.length > 0 ? 'equal-rewards' : 'empty' });
    } else {
      const group: BufferedGroup = {
        groupId: g.groupId,
        instanceId: g.instanceId,
        results,
        rewards,
        minWeightVersion: groupVersion(results),
        staleness: groupStaleness(results),
        complete: results.length === this.options.n,
        stopped: g.stopped,
        cancelled: g.cancelled,
        seq: ++this.seq,
        deliveries: 0,
      };
      this.ready.push(group);
      this.emit({ type: 'group.ready', group });
    }
    this.fill();
    this.wake();
  }

  private emit(e: BufferEvent): void {
    for (const fn of this.listeners) {
      try {
        fn(e);
      } catch {
        // A listener's fault is its own; the buffer goes on.
      }
    }
  }

  private wake(): void {
    const ws = [...this.waiters];
    this.waiters.clear();
    for (const w of ws) w();
  }
}
