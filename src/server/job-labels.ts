import type { RolloutHandle } from '../runtime/runtime-api.js';

/**
 * The ProRL `job_id` labels of live `/process` rollouts. A label is the client's, not an id: many
 * live rollouts may share one (NeMo Gym reuses `job_id = instance_id` for every repeat), each runs
 * as its own rollout, and `/cancel` of the label reaches every one of them. Entries leave when their
 * rollout's `/process` answers, so the map holds live jobs only.
 */
export class JobLabels {
  private readonly byLabel = new Map<string, Set<RolloutHandle>>();
  private readonly byId = new Map<string, string>();

  /** Records that `handle` runs under `label`. */
  add(label: string, handle: RolloutHandle): void {
    let set = this.byLabel.get(label);
    if (!set) this.byLabel.set(label, (set = new Set()));
    set.add(handle);
    this.byId.set(handle.id, label);
  }

  /** Forgets `handle` (its `/process` answered). */
  remove(label: string, handle: RolloutHandle): void {
    const set = this.byLabel.get(label);
    set?.delete(handle);
    if (set?.size === 0) this.byLabel.delete(label);
    this.byId.delete(handle.id);
  }

  /** The live rollouts under `label` (a snapshot). */
  handles(label: string): RolloutHandle[] {
    return [...(this.byLabel.get(label) ?? [])];
  }

  /** The label of a live rollout id, when it was submitted through `/process`. */
  labelOf(id: string): string | undefined {
    return this.byId.get(id);
  }
}
