/**
 * A concurrency limit with a priority wait queue: at most `limit` holders at a time. Waiters
 * are granted highest priority first, FIFO within a priority (Polar's `dispatch_priority`); a
 * holder is never preempted. Each priority's waiters are an insertion-ordered Map, so "withdraw
 * one" is O(1) and "grant the next" is O(distinct priorities waiting) — one, unless a client
 * asks for priorities (Polar allows 0..100).
 * The pool never calls back into a rollout itself; `onGrant` does (the supervisor sends `SLOT`).
 *
 * A released slot passes to the next waiter one microtask later, not inside `release`: a
 * rollout releases its slot in an exit action, before its final state's entry aborts the work
 * still running for it. Handing the slot over synchronously would let the next rollout start
 * while the previous one's work is not yet told to stop (the property test caught this).
 */
export class StagePool {
  private readonly holders = new Set<string>();
  /** Waiting ids → their priority. */
  private readonly waiters = new Map<string, number>();
  /** priority → its waiters in arrival order; a priority leaves the map when its queue empties. */
  private readonly queues = new Map<number, Map<string, true>>();
  /** The most holders seen at once (tests assert it never exceeds the limit). */
  highWater = 0;
  private pumpScheduled = false;

  constructor(
    readonly name: string,
    readonly limit: number,
    private readonly onGrant: (id: string) => void,
  ) {}

  get active(): number {
    return this.holders.size;
  }

  get waiting(): number {
    return this.waiters.size;
  }

  /**
   * Asks for a slot: granted now (onGrant called synchronously) or queued behind every waiter of
   * a higher or equal `priority` (default 0). Idempotent: a waiter asking again keeps its place.
   */
  request(id: string, priority = 0): void {
    if (this.holders.has(id) || this.waiters.has(id)) return;
    if (this.holders.size < this.limit && this.waiters.size === 0) return this.grant(id);
    this.waiters.set(id, priority);
    let q = this.queues.get(priority);
    if (!q) this.queues.set(priority, (q = new Map()));
    q.set(id, true);
  }

  /**
   * Takes a slot only if one is free right now and nobody waits (never queues, never calls
   * `onGrant`). Lets a finishing stage take the next stage's slot without a wait round trip.
   */
  tryTake(id: string): boolean {
    if (this.holders.has(id)) return true;
    if (this.holders.size >= this.limit || this.waiters.size > 0 || this.pumpScheduled) return false;
    this.holders.add(id);
    if (this.holders.size > this.highWater) this.highWater = this.holders.size;
    return true;
  }

  /** True while `id` holds a slot. */
  holds(id: string): boolean {
    return this.holders.has(id);
  }

  /** Leaves the wait queue; no-op when not waiting. */
  withdraw(id: string): void {
    const p = this.waiters.get(id);
    if (p === undefined) return;
    this.waiters.delete(id);
    const q = this.queues.get(p)!;
    q.delete(id);
    if (q.size === 0) this.queues.delete(p);
  }

  /** Gives a held slot back; the oldest waiter gets it on the next microtask. No-op when not held. */
  release(id: string): void {
    if (!this.holders.delete(id)) return;
    if (this.pumpScheduled || this.waiters.size === 0) return;
    this.pumpScheduled = true;
    queueMicrotask(() => {
      this.pumpScheduled = false;
      this.pump();
    });
  }

  /** Withdraws and releases: the safety net when a rollout ends. */
  forget(id: string): void {
    this.withdraw(id);
    this.release(id);
  }

  private pump(): void {
    while (this.holders.size < this.limit && this.waiters.size > 0) {
      let top = -Infinity;
      for (const p of this.queues.keys()) if (p > top) top = p;
      const next = this.queues.get(top)!.keys().next().value as string;
      this.withdraw(next);
      this.grant(next);
    }
  }

  private grant(id: string): void {
    this.holders.add(id);
    if (this.holders.size > this.highWater) this.highWater = this.holders.size;
    this.onGrant(id);
  }
}
