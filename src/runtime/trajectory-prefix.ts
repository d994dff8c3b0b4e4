import { randomUUID } from 'node:crypto';
import { ValidationError } from '../errors.js';
import { versionRange, versionRuns, type VersionRun } from '../llm/weight-versions.js';
import type { Trajectory, TrajectoryPrefixRef } from '../protocol/trajectory.js';

/**
 * The part of `full` after `ref` (its first `ref.tokens` tokens, `ref.turns` turns and
 * `ref.messages` messages), referencing `ref`: what a branch's result carries (#26). Weight
 * versions are recounted over the remaining turns; diagnostics stay the whole record's. Pure.
 */
export function stripPrefix(full: Trajectory, ref: TrajectoryPrefixRef): Trajectory {
  const turns = full.turns.slice(ref.turns);
  const runs = versionRuns(turns);
  const range = versionRange(runs);
  const out: Trajectory = {
    ...full,
    turns,
    tokens: full.tokens.slice(ref.tokens),
    lossMask: full.lossMask.slice(ref.tokens),
    logprobs: full.logprobs.slice(ref.tokens),
    messages: full.messages.slice(ref.messages),
    weightVersions: runs,
    minWeightVersion: range.min,
    maxWeightVersion: range.max,
    prefix: ref,
  };
  return out;
}

/** Options of {@link materializeTrajectory}. */
export interface MaterializeOptions {
  /**
   * Zero the loss mask (and logprobs) over the shared prefix, so a trainer that trains on every
   * branch of a tree counts the prefix's sampled tokens once (on the rollout that sampled them)
   * rather than once per branch. Default false: the trajectory is token-exact on its own, mask 1
   * on every token the policy sampled, prefix included.
   */
  maskPrefix?: boolean | undefined;
}

/**
 * The full trajectory of a branch: its shared prefix (followed to the root through nested
 * forks) joined with its own part — tokens, loss mask, logprobs, turns and messages exactly as
 * one unforked rollout would have them. A trajectory without a prefix is returned as it is.
 * @throws ValidationError `prefix` when a prefix is unknown to `lookup` or does not have the
 *   length the reference says.
 */
export function materializeTrajectory(t: Trajectory, lookup: (id: string) => Trajectory | undefined, opts: MaterializeOptions = {}): Trajectory {
  const ref = t.prefix;
  if (!ref) return t;
  const stored = lookup(ref.id);
  if (!stored) throw new ValidationError(`prefix ${ref.id} is not held (its branches' results are no longer retained)`, [{ path: 'prefix.id', message: 'unknown prefix' }]);
  const base = materializeTrajectory(stored, lookup);
  if (base.tokens.length !== ref.tokens || base.turns.length !== ref.turns) {
    throw new ValidationError(`prefix ${ref.id} has ${base.tokens.length} tokens and ${base.turns.length} turns, the reference says ${ref.tokens} and ${ref.turns}`, [{ path: 'prefix', message: 'length mismatch' }]);
  }
  const mask = opts.maskPrefix ? new Array<0 | 1>(base.tokens.length).fill(0) : base.lossMask;
  const lps = opts.maskPrefix ? new Array<number>(base.tokens.length).fill(0) : base.logprobs;
  const runs = joinRuns(opts.maskPrefix ? [] : (base.weightVersions ?? []), t.weightVersions ?? []);
  const range = versionRange(runs);
  const { prefix: _ref, ...own } = t;
  return {
    ...own,
    turns: base.turns.concat(t.turns),
    tokens: base.tokens.concat(t.tokens),
    lossMask: mask.concat(t.lossMask),
    logprobs: lps.concat(t.logprobs),
    messages: base.messages.concat(t.messages),
    tokenSource: base.tokenSource === 'retokenized' || t.tokenSource === 'retokenized' ? 'retokenized' : (t.tokenSource ?? base.tokenSource),
    weightVersions: runs,
    minWeightVersion: range.min,
    maxWeightVersion: range.max,
  };
}

function joinRuns(a: readonly VersionRun[], b: readonly VersionRun[]): VersionRun[] {
  const out = a.map((r) => ({ ...r }));
  for (const r of b) {
    const last = out[out.length - 1];
    if (last && last.version === r.version) last.tokens += r.tokens;
    else out.push({ ...r });
  }
  return out;
}

/**
 * The shared prefixes of a runtime's forks (#26), each stored once and referenced by its
 * branches. A prefix is held while any branch referencing it (directly, or through a nested
 * fork's prefix) is live or retained; {@link release} drops it with its last reference. A
 * prefix taken at a branch's fork stores only what follows that branch's own prefix.
 */
export class PrefixStore {
  private readonly map = new Map<string, { traj: Trajectory; refs: number }>();

  /** Prefixes held now. */
  get size(): number {
    return this.map.size;
  }

  /**
   * Stores `full` (a rollout's record at a turn boundary) as a new prefix with no reference yet;
   * `base` is that rollout's own prefix when it is a branch (only the part after it is kept).
   */
  put(full: Trajectory, base: TrajectoryPrefixRef | null): TrajectoryPrefixRef {
    const id = `p-${randomUUID()}`;
    if (base) this.retain(base.id);
    this.map.set(id, { traj: base ? stripPrefix(full, base) : full, refs: 0 });
    return { id, tokens: full.tokens.length, turns: full.turns.length, messages: full.messages.length };
  }

  /** The stored prefix `id` (its own part, referencing its base when nested), or undefined. */
  get(id: string): Trajectory | undefined {
    return this.map.get(id)?.traj;
  }

  retain(id: string): void {
    const e = this.map.get(id);
    if (e) e.refs++;
  }

  /** Drops one reference; the prefix goes (and releases its base) with its last. */
  release(id: string): void {
    const e = this.map.get(id);
    if (!e || --e.refs > 0) return;
    this.map.delete(id);
    if (e.traj.prefix) this.release(e.traj.prefix.id);
  }

  /** Every stored part `t` needs to be materialized, by id (for a tree's result). */
  chain(t: Trajectory, into: Record<string, Trajectory> = {}): Record<string, Trajectory> {
    for (let ref = t.prefix; ref && !into[ref.id]; ) {
      const p = this.map.get(ref.id)?.traj;
      if (!p) break;
      into[ref.id] = p;
      ref = p.prefix;
    }
    return into;
  }
}
