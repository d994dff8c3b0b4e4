import type { WeightVersion } from '../llm/weight-versions.js';
import type { RolloutResult } from '../protocol/trajectory.js';

// The rollout buffer's public types (rollout-buffer.ts re-exports them).

/** A completed group as the trainer takes it. */
export interface BufferedGroup {
  groupId: string;
  instanceId: string | null;
  /** The kept members' results, in trajectory-id order (`n` of them unless the group was stopped early or members were cancelled from outside). */
  results: RolloutResult[];
  rewards: (number | null)[];
  /** The oldest weight version any kept token was sampled at (null: unknown). */
  minWeightVersion: WeightVersion | null;
  /** The largest `trajectory.staleness` of the kept members (null when none is known). */
  staleness: number | null;
  /** All n members were kept. */
  complete: boolean;
  /** The trainer stopped it early ({@link RolloutBuffer.stopGroup}). */
  stopped: boolean;
  /** Members cancelled (over-provisioned beyond the first n to finish, or stopped). */
  cancelled: number;
  /** Completion order within the buffer, from 1. */
  seq: number;
  /** How many times the group has been handed out, this time included: above 1 after a lease was released or expired. */
  deliveries: number;
}

/** A group handed out on a lease ({@link RolloutBuffer.lease}): held for the holder until acked. */
export interface BufferLease {
  /** Names this hand-out to {@link RolloutBuffer.ack} / {@link RolloutBuffer.release}; a redelivery gets a new one. */
  leaseId: string;
  group: BufferedGroup;
}

/** What {@link RolloutBuffer.ack} and {@link RolloutBuffer.release} did with each lease id. */
export interface LeaseOutcome {
  /** Lease ids acked (or released). */
  done: string[];
  /** Lease ids not held: unknown, already acked, or released (by the holder or by expiry) — the group may have gone to another holder. */
  unknown: string[];
}

/** What listeners of {@link RolloutBuffer.onEvent} get, as groups complete or are dropped. */
export type BufferEvent =
  | { type: 'group.ready'; group: BufferedGroup }
  /** Handed out for good: taken, or its lease acked (`leaseId`). */
  | { type: 'group.delivered'; group: BufferedGroup; leaseId: string | null }
  | { type: 'group.dropped'; groupId: string; instanceId: string | null; reward: number | null; reason: 'equal-rewards' | 'stale' | 'empty' }
  /** A leased group came back in line unacked: released by its holder, or its lease ran out. */
  | { type: 'group.returned'; groupId: string; leaseId: string; reason: 'released' | 'expired' };

/** The counters of a buffer (the `/v1` form is `BufferStatsSchema`). */
export interface RolloutBufferStats {
  queuedPrompts: number;
  inFlight: number;
  ready: number;
  /** Groups handed out on a lease and not yet acked. */
  leased: number;
  started: number;
  /** Groups taken, or leased and acked. */
  delivered: number;
  /** Leased groups that came back in line unacked (released or expired). */
  returned: number;
  dropped: number;
  stale: number;
  stopped: number;
  cancelledMembers: number;
  ended: boolean;
  done: boolean;
}
