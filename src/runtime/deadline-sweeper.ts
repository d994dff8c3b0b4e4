import type { Clock, TimerHandle } from '../clock.js';
import { DeadlineIndex } from './deadline-index.js';
import type { RolloutSession } from './rollout-session.js';

/**
 * What the sweeper sees of its owner (the supervisor): the few members it needs, after
 * BullMQ's `LockManagerWorkerContext`.
 */
export interface SweeperContext {
  readonly clock: Clock;
  /** How often the sweep runs while anything is live. */
  readonly sweepIntervalMs: number;
  /** Live rollouts; the sweep keeps running while there are any. */
  liveCount(): number;
  /** The live rollout `id`, if any. */
  session(id: string): RolloutSession | undefined;
  /** The earliest deadline of `s` (Infinity when none). */
  nextDeadline(s: RolloutSession): number;
  /** Called when the entry of `s` falls due: enforce whatever deadline has passed. */
  due(s: RolloutSession, now: number): void;
}

/**
 * Owns the deadline heap and the sweep timer of a runtime: one timer for all rollouts, never one
 * per rollout (the deadlines themselves are data in each session, so a restore loses nothing).
 *
 * The owner tells it of every change to a rollout's deadlines with {@link track}; the sweeper
 * then makes sure it will look at that rollout no later than its earliest deadline and that the
 * sweep is running. It keeps at most one live heap entry per rollout (`armed`) and ignores
 * superseded entries as they pop, so the heap stays O(live rollouts).
 *
 * It also bounds waits that must not hang a rollout (a provider's sandbox close) with
 * {@link bound}, checked on the same sweep instead of a timer each.
 */
export class DeadlineSweeper {
  private readonly heap = new DeadlineIndex();
  /** The time of each rollout's live heap entry. */
  private readonly armed = new Map<string, number>();
  /** Bounded waits in progress: how to end each one (called with {@link CUT} when cut short) and its cut-off. */
  private readonly cuts = new Map<(cut?: unknown) => void, number>();
  private timer: TimerHandle | null = null;
  private cutCount = 0;

  constructor(private readonly ctx: SweeperContext) {}

  /** Waits given up by {@link bound} because they ran past their limit. */
  get overdue(): number {
    return this.cutCount;
  }

  /** The deadlines of `s` may have moved: look at it no later than its earliest one. */
  track(s: RolloutSession): void {
    if (s.settled) return;
    const at = this.ctx.nextDeadline(s);
    if (at < (this.armed.get(s.id) ?? Infinity)) {
      this.armed.set(s.id, at);
      this.heap.push({ at, rolloutId: s.id });
      // Superseded entries stay until they pop; compact when they dominate the heap.
      if (this.heap.size > 4 * this.ctx.liveCount() + 1024) {
        this.heap.compact((e) => this.armed.get(e.rolloutId) === e.at);
      }
    }
    this.ensure();
  }

  /** `s` is settled: no deadline of it counts any more. */
  forget(s: RolloutSession): void {
    this.armed.delete(s.id);
  }

  /**
   * Resolves when `work` settles, or at the first sweep `ms` or more from now, whichever comes
   * first (the latter counted in {@link overdue}). Never rejects.
   */
  bound(work: Promise<unknown>, ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      // One closure per wait (once per ended rollout): the sweep calls it to cut the wait, the
      // work's settling to end it; whichever comes first counts.
      const finish = (cut?: unknown): void => {
        if (!this.cuts.delete(finish)) return;
        if (cut === CUT) this.cutCount++;
        resolve();
      };
      this.cuts.set(finish, this.ctx.clock.now() + ms);
      this.ensure();
      // Both outcomes handled: this chain cannot reject.
      void work.then(finish, finish);
    });
  }

  /** Stops the sweep timer and drops every entry (the runtime is closed). */
  stop(): void {
    this.idle();
    this.heap.clear();
    this.armed.clear();
  }

  /** Stops the sweep timer; the next {@link track} or {@link bound} starts it again. */
  idle(): void {
    if (this.timer === null) return;
    this.ctx.clock.clearTimeout(this.timer);
    this.timer = null;
  }

  private ensure(): void {
    if (this.timer !== null) return;
    this.timer = this.ctx.clock.setTimeout(() => this.sweep(), this.ctx.sweepIntervalMs);
  }

  /** One pass: ends overdue waits, then looks at every rollout whose entry fell due. */
  private sweep(): void {
    this.timer = null;
    const now = this.ctx.clock.now();
    for (const [finish, at] of this.cuts) if (now >= at) finish(CUT);
    for (const e of this.heap.popDue(now)) {
      if (this.armed.get(e.rolloutId) !== e.at) continue;
      this.armed.delete(e.rolloutId);
      const s = this.ctx.session(e.rolloutId);
      if (!s || s.settled) continue;
      this.ctx.due(s, now);
      this.track(s);
    }
    if (this.ctx.liveCount() > 0 || this.cuts.size > 0) this.ensure();
  }
}

/** What the sweep passes to a bounded wait it cuts short (the work's own settling passes its value). */
const CUT = Symbol('cut');
