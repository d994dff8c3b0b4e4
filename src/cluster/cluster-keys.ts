/**
 * Redis key names of one cluster. One place, so the gateway, the workers and the Lua scripts
 * agree. `{prefix}:rollouts` belongs to BullMQ (its queue); every other key is ours.
 */
export class ClusterKeys {
  /** The BullMQ queue name (BullMQ prefixes it with {@link prefix}). */
  readonly queue = 'rollouts';
  constructor(readonly prefix: string) {}

  /** Stream of every rollout event; entry id `<seq>-0` is the global seq. */
  get events(): string {
    return `${this.prefix}:events`;
  }
  /** INCR counter behind the global seq. */
  get seq(): string {
    return `${this.prefix}:seq`;
  }
  /** Hash: backend id → JSON registration. */
  get backends(): string {
    return `${this.prefix}:backends`;
  }
  /** Hash: `paused`, `generation` — cluster-wide settings a late worker reads at start (weight versions live in the registry, per backend). */
  get settings(): string {
    return `${this.prefix}:settings`;
  }
  /** Hash: node id → JSON heartbeat. */
  get nodes(): string {
    return `${this.prefix}:nodes`;
  }
  /** Hash: node id → `<expiresAtMs>|<JSON backend id → in-flight calls>` (shared least-loaded keys). */
  get load(): string {
    return `${this.prefix}:load`;
  }
  /** Pub/sub channel of control messages. */
  get control(): string {
    return `${this.prefix}:control`;
  }
  /** The committed result of a rollout (SET NX: the first result wins). */
  result(id: string): string {
    return `${this.prefix}:result:${id}`;
  }
  /** Per-rollout event counter (rseq), continuing across nodes. */
  rseq(id: string): string {
    return `${this.prefix}:rseq:${id}`;
  }
  /** Hash: a rollout's latest state, turn, attempt, group (for lookups by any gateway). */
  summary(id: string): string {
    return `${this.prefix}:summary:${id}`;
  }
  /** Marker: cancel requested (a worker taking the job later sees it). */
  cancel(id: string): string {
    return `${this.prefix}:cancel:${id}`;
  }
}
