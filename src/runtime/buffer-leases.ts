import { randomUUID } from 'node:crypto';
import type { BufferedGroup } from './buffer-types.js';
import type { Clock, TimerHandle } from '../clock.js';

/**
 * The groups a rollout buffer has handed out on a lease. Each lease's expiry is data
 * (`expiresAt`, Infinity for a lease without a time); one timer, armed for the earliest, looks at
 * them and calls `onExpire(leaseId)` for each that ran out unacked (the owner then ends it).
 */
export class LeaseTable {
  private readonly held = new Map<string, { group: BufferedGroup; expiresAt: number }>();
  private timer: TimerHandle | null = null;
  private armedAt = Infinity;

  constructor(
    private readonly clock: Clock,
    private readonly onExpire: (leaseId: string) => void,
  ) {}

  get size(): number {
    return this.held.size;
  }

  /** Holds `group` under a new lease id, expiring `leaseMs` from now when given, and answers the id. */
  hold(group: BufferedGroup, leaseMs: number | undefined): string {
    const leaseId = `lease-${randomUUID()}`;
    const expiresAt = leaseMs === undefined ? Infinity : this.clock.now() + leaseMs;
    this.held.set(leaseId, { group, expiresAt });
    if (expiresAt < this.armedAt) this.arm(expiresAt);
    return leaseId;
  }

  /** Lets go of a lease and answers its group; undefined when `leaseId` is not held. */
  end(leaseId: string): BufferedGroup | undefined {
    const l = this.held.get(leaseId);
    if (!l) return undefined;
    this.held.delete(leaseId);
    if (this.held.size === 0) this.disarm();
    return l.group;
  }

  /** Lets go of every lease. */
  clear(): void {
    this.held.clear();
    this.disarm();
  }

  private arm(at: number): void {
    this.disarm();
    this.armedAt = at;
    this.timer = this.clock.setTimeout(() => this.sweep(), Math.max(0, at - this.clock.now()));
  }

  private disarm(): void {
    if (this.timer !== null) this.clock.clearTimeout(this.timer);
    this.timer = null;
    this.armedAt = Infinity;
  }

  /** Expires what is due, then arms for the next expiry (a scan: a buffer holds at most B leases). */
  private sweep(): void {
    this.timer = null;
    this.armedAt = Infinity;
    const now = this.clock.now();
    const due: string[] = [];
    for (const [id, l] of this.held) if (l.expiresAt <= now) due.push(id);
    for (const id of due) this.onExpire(id);
    let next = Infinity;
    for (const l of this.held.values()) next = Math.min(next, l.expiresAt);
    if (next < Infinity && next < this.armedAt) this.arm(next);
  }
}
