// Reward-first aggregates of the page: rewards per data source (histogram and mean), mean reward
// over time, and GRPO groups (members side by side, advantages, groups with no signal). Pure (no
// DOM): the Store feeds it one ended rollout at a time, the render loop reads it once a frame.
// @ts-check

/**
 * @typedef {import('./types.js').Member} Member
 * @typedef {{ id: string, dataSource: string, groupId: string|null, trajectoryId: unknown, outcome: string|null, reward: number|null }} Counted
 */

/** Histogram bins over the reward range. */
export const REWARD_BINS = 10;

/** A group whose rewards differ by less than this has no learning signal (GRPO advantage 0). */
const EQUAL_EPS = 1e-9;

export class RewardStats {
  /**
   * @param {{ bucketMs?: number, maxBuckets?: number, maxGroups?: number }} [opts]
   */
  constructor(opts = {}) {
    this.bucketMs = opts.bucketMs ?? 10_000;
    this.maxBuckets = opts.maxBuckets ?? 360;
    // Groups beyond this are forgotten oldest-first, so a long-lived tab stays bounded.
    this.maxGroups = opts.maxGroups ?? 5000;
    /**
     * data_source alias -> the family it is counted under, as `rollout run`'s summary merges
     * them (served by the page's server at /visualizer/info.json; see setFamilies).
     * @type {Map<string, string>}
     */
    this.families = new Map();
    // The fields reset() sets, declared for the type checker (these statements do nothing).
    /* eslint-disable @typescript-eslint/no-unused-expressions -- JSDoc field declarations */
    /** @type {Map<string, { n: number, sum: number, values: Map<string, number> }>} */ this.bySource;
    /** @type {WeakMap<object, { dataSource: string, reward: number, key: number, zero: boolean }>} */ this.counted;
    /** @type {Map<number, { t: number, n: number, sum: number }>} */ this.buckets;
    /** @type {Map<string, { id: string, members: Map<string, Member> }>} */ this.groups;
    /** @type {number} */ this.completedZero;
    /** @type {number} */ this.version;
    /* eslint-enable @typescript-eslint/no-unused-expressions */
    this.reset();
  }

  reset() {
    /** data source family -> { n, sum, values: Map<rolloutId, reward> } (values feed the histogram). */
    this.bySource = new Map();
    /** What add() counted per rollout record, for remove(). Weak: a forgotten record costs nothing. */
    this.counted = new WeakMap();
    /** time bucket -> { t, n, sum } (mean reward over time). */
    this.buckets = new Map();
    /** group id -> { id, members: Map<rolloutId, Member> } */
    this.groups = new Map();
    /** Completed rollouts whose reward was 0 or less (the outcome chart splits them out). */
    this.completedZero = 0;
    this.version = 0;
  }

  /**
   * Counts one ended rollout. Call once per rollout (the Store guards it).
   * @param {Counted} r
   * @param {number} ts when it ended (runtime clock)
   */
  add(r, ts) {
    this.version++;
    if (r.groupId) this._member(r);
    if (typeof r.reward !== 'number' || !Number.isFinite(r.reward)) return;
    const src = this.familyOf(r.dataSource);
    let s = this.bySource.get(src);
    if (s === undefined) {
      s = { n: 0, sum: 0, values: new Map() };
      this.bySource.set(src, s);
    }
    if (s.values.has(r.id)) return;
    s.n++;
    s.sum += r.reward;
    s.values.set(r.id, r.reward);
    const zero = r.outcome === 'completed' && r.reward <= 0;
    if (zero) this.completedZero++;
    const key = Math.floor(ts / this.bucketMs);
    // What to take back when the page forgets this rollout (remove).
    this.counted.set(r, { dataSource: r.dataSource, reward: r.reward, key, zero });
    let b = this.buckets.get(key);
    if (b === undefined) {
      b = { t: key * this.bucketMs, n: 0, sum: 0 };
      this.buckets.set(key, b);
      if (this.buckets.size > this.maxBuckets) this.buckets.delete(/** @type {number} */ (this.buckets.keys().next().value));
    }
    b.n++;
    b.sum += r.reward;
  }

  /**
   * Takes back what {@link RewardStats#add} counted for a rollout the page forgets, so the
   * reward figures cover the same rollouts as the table and the outcome counts.
   * @param {{ id: string }} r
   */
  remove(r) {
    const c = this.counted.get(r);
    if (c === undefined) return;
    this.counted.delete(r);
    this.version++;
    const src = this.familyOf(c.dataSource);
    const s = this.bySource.get(src);
    if (s !== undefined && s.values.delete(r.id)) {
      s.n--;
      s.sum -= c.reward;
      if (s.n === 0) this.bySource.delete(src);
    }
    if (c.zero) this.completedZero--;
    const b = this.buckets.get(c.key);
    if (b !== undefined) {
      b.n--;
      b.sum -= c.reward;
      if (b.n === 0) this.buckets.delete(c.key);
    }
  }

  /**
   * The family a data_source is counted under: itself unless it is an alias.
   * @param {string} dataSource
   */
  familyOf(dataSource) {
    const ds = dataSource || '(none)';
    return this.families.get(ds) ?? ds;
  }

  /**
   * Sets the alias map (alias -> family) and merges what was already counted under an alias
   * into its family, so rewards that arrived before the map are not left apart.
   * @param {Record<string, string>} aliases
   */
  setFamilies(aliases) {
    this.families = new Map(Object.entries(aliases ?? {}).filter(([k, v]) => typeof k === 'string' && typeof v === 'string'));
    const old = this.bySource;
    this.bySource = new Map();
    for (const [name, s] of old) {
      const fam = this.familyOf(name);
      const into = this.bySource.get(fam);
      if (into === undefined) {
        this.bySource.set(fam, s);
        continue;
      }
      into.n += s.n;
      into.sum += s.sum;
      for (const [id, v] of s.values) into.values.set(id, v);
    }
    this.version++;
  }

  /**
   * Registers a rollout as a member of its group before it ends, so the group view lists every
   * member (live ones without a reward yet).
   * @param {Counted} r
   */
  join(r) {
    if (!r.groupId) return;
    this._member(r);
    this.version++;
  }

  /** @param {Counted} r a member of a group (its groupId is set) */
  _member(r) {
    const groupId = /** @type {string} */ (r.groupId);
    let g = this.groups.get(groupId);
    if (g === undefined) {
      g = { id: groupId, members: new Map() };
      this.groups.set(groupId, g);
      if (this.groups.size > this.maxGroups) this.groups.delete(/** @type {string} */ (this.groups.keys().next().value));
    }
    g.members.set(r.id, { id: r.id, trajectoryId: r.trajectoryId ?? null, outcome: r.outcome ?? null, reward: typeof r.reward === 'number' ? r.reward : null });
  }

  /**
   * Per data source: count, mean, and a histogram of `bins` bins over [lo, hi] — the range of
   * every reward seen, widened to include [0, 1] (most rewards live there).
   */
  histogram(bins = REWARD_BINS) {
    let lo = 0;
    let hi = 1;
    for (const s of this.bySource.values()) for (const v of s.values.values()) {
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    const width = (hi - lo) / bins;
    const sources = [];
    for (const [name, s] of this.bySource) {
      const counts = new Array(bins).fill(0);
      for (const v of s.values.values()) counts[Math.min(bins - 1, Math.floor((v - lo) / width))]++;
      sources.push({ name, n: s.n, mean: s.sum / s.n, counts });
    }
    sources.sort((a, b) => (a.name < b.name ? -1 : 1));
    return { lo, hi, bins, sources };
  }

  /** Mean reward per time bucket, oldest first. */
  overTime() {
    return [...this.buckets.values()].sort((a, b) => a.t - b.t).map((b) => ({ t: b.t, mean: b.sum / b.n, n: b.n }));
  }

  /**
   * One group as the group view shows it: members in trajectory order with their GRPO advantage
   * ((reward − mean) / std over the rewarded members; 0 when the std is 0), and whether the
   * group has no signal (every member ended and all rewards are equal). Null for an unknown id.
   * @param {string} id
   */
  group(id) {
    const g = this.groups.get(id);
    if (g === undefined) return null;
    return describeGroup(g.id, [...g.members.values()]);
  }

  /** Every group with a summary, and how many of them carry no signal. */
  groupSummary() {
    let noSignal = 0;
    let complete = 0;
    for (const g of this.groups.values()) {
      const d = describeGroup(g.id, [...g.members.values()]);
      if (d.complete) complete++;
      if (d.noSignal) noSignal++;
    }
    return { groups: this.groups.size, complete, noSignal };
  }
}

/**
 * The GRPO view of a group's members. Pure.
 * @param {string} id
 * @param {Array<{ id: string, trajectoryId: unknown, outcome: string|null, reward: number|null }>} members
 */
export function describeGroup(id, members) {
  const sorted = [...members].sort((a, b) => String(a.trajectoryId ?? a.id).localeCompare(String(b.trajectoryId ?? b.id), undefined, { numeric: true }));
  const rewards = sorted.filter((m) => m.reward !== null).map((m) => /** @type {number} */ (m.reward));
  const n = rewards.length;
  const mean = n === 0 ? null : rewards.reduce((a, x) => a + x, 0) / n;
  const std = n === 0 || mean === null ? null : Math.sqrt(rewards.reduce((a, x) => a + (x - mean) ** 2, 0) / n);
  const complete = sorted.length > 0 && sorted.every((m) => m.outcome !== null);
  const allEqual = n >= 2 && std !== null && std < EQUAL_EPS;
  return {
    id,
    mean,
    std,
    complete,
    // All-equal rewards give every member advantage 0: the group teaches the policy nothing.
    noSignal: complete && allEqual,
    members: sorted.map((m) => ({
      ...m,
      advantage: m.reward === null || mean === null ? null : std !== null && std >= EQUAL_EPS ? (m.reward - mean) / std : 0,
    })),
  };
}
