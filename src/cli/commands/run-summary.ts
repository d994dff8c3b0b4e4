import { violationCounts } from '../../protocol/integrity.js';
import type { RolloutResult } from '../../protocol/trajectory.js';

/**
 * The summary `rollout run` prints and writes as `summary.json`. Pure functions over results.
 */

/**
 * The unbiased pass@k estimator of Chen et al. (2021): the probability that at least one of k
 * samples drawn without replacement from n, of which c are correct, is correct:
 * `1 - C(n-c, k) / C(n, k)`, computed as a product so it never overflows.
 * Throws RangeError when k > n, or c is outside 0..n.
 */
export function passAtK(n: number, c: number, k: number): number {
  if (!Number.isInteger(n) || !Number.isInteger(c) || !Number.isInteger(k) || k < 1 || k > n || c < 0 || c > n) {
    throw new RangeError(`passAtK: need 1 <= k <= n and 0 <= c <= n (n=${n}, c=${c}, k=${k})`);
  }
  if (n - c < k) return 1;
  let prob = 1;
  for (let i = n - c + 1; i <= n; i++) prob *= 1 - k / i;
  return 1 - prob;
}

/** The q-quantile (0..1) of `values` by the nearest-rank method; null when empty. */
export function quantile(values: number[], q: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil(q * sorted.length)));
  return sorted[rank - 1] as number;
}

/** p50 / p95 of one stage, in milliseconds. */
export interface StageTiming {
  p50: number | null;
  p95: number | null;
}

/** What `summary.json` holds. */
export interface RunSummary {
  rollouts: number;
  /** Rollouts that finished (every outcome but `cancelled`): the base of every rate below. */
  finished: number;
  /** Tasks with at least one finished rollout. */
  tasks: number;
  /** Tasks in the file (more than `tasks` after an early Ctrl-C); null when not told. */
  tasksInFile: number | null;
  /** Samples per task. */
  n: number;
  outcomes: Record<string, number>;
  resolved: number;
  /** Mean reward over rollouts that have one (completed / truncated). */
  meanReward: number | null;
  /** Rollouts cancelled (Ctrl-C, a budget): not finished, so left out of pass@k. */
  cancelled: number;
  /**
   * Mean over tasks with a finished rollout of the unbiased pass@1 (c / n), n counting only
   * finished (not cancelled) samples. Rollouts that failed for infra count as not passed.
   */
  passAt1: number;
  /** Mean over those tasks of pass@n (1 when any finished sample resolved). */
  passAtN: number;
  /** Rewards per task family: a histogram of 10 bins over [0, 1] (values outside clamp to the ends). */
  rewardHistogram: Record<string, number[]>;
  /** GRPO groups (tasks with n > 1) whose finished rewards are all equal: no learning signal. */
  groups: { total: number; noSignal: number };
  /** Sampled tokens per assistant turn, and rollouts whose last turn the token limit cut. */
  tokensPerTurn: number | null;
  truncated: number;
  timings: { queue: StageTiming; init: StageTiming; run: StageTiming; eval: StageTiming; wall: StageTiming };
  tokens: { total: number; sampled: number; perRollout: number | null };
  turns: { total: number; perRollout: number | null };
  elapsedMs: number;
  rolloutsPerMinute: number;
  /** The most frequent errors of failed rollouts (`code: message`), most frequent first, at most 5. */
  errors: { error: string; count: number }[];
  /** Per task family (the handler's name, so `deepscaler` counts as `math`): rollouts, resolved, mean reward. */
  byDataSource: Record<string, { rollouts: number; resolved: number; meanReward: number | null }>;
  /** Rollouts the integrity monitor flagged (#27), and per violation kind how many rollouts had one; absent when none was. */
  flagged?: { rollouts: number; byKind: Record<string, number> };
}

function stage(values: number[]): StageTiming {
  return { p50: quantile(values, 0.5), p95: quantile(values, 0.95) };
}

function mean(values: number[]): number | null {
  return values.length === 0 ? null : values.reduce((a, b) => a + b, 0) / values.length;
}

/**
 * What the summary needs of one rollout: a few numbers instead of the whole trajectory, so a
 * long run does not hold every trajectory in memory.
 */
export interface SummaryRow {
  /** Groups the n samples of one task (the caller's task index). */
  taskKey: string;
  outcome: RolloutResult['outcome'];
  resolved: boolean;
  reward: number | null;
  dataSource: string;
  tokens: number;
  sampled: number;
  turns: number;
  timing: RolloutResult['timing'];
  error: string | null;
  /** The integrity monitor's violations by kind (#27), when it found any. */
  violations?: Record<string, number> | undefined;
}

/** Reduces a result to its {@link SummaryRow}. */
export function toSummaryRow(taskKey: string, r: RolloutResult): SummaryRow {
  let sampled = 0;
  for (const t of r.trajectory.turns) sampled += t.outputIds.length;
  return {
    taskKey,
    outcome: r.outcome,
    resolved: r.resolved,
    reward: r.reward,
    dataSource: r.dataSource,
    tokens: r.trajectory.tokens.length,
    sampled,
    turns: r.trajectory.turns.length,
    timing: r.timing,
    error: r.error ? `${r.error.code}: ${r.error.message.slice(0, 200)}` : null,
    ...(r.integrity?.violations.length ? { violations: violationCounts(r.integrity.violations) } : {}),
  };
}

/**
 * Summarizes one run. `n` is the samples per task; two file lines with the same instance_id
 * stay two tasks (rows are grouped by `taskKey`). `familyOf` maps a data_source to the family it
 * is reported under (default: itself).
 */
export function summarize(rows: SummaryRow[], n: number, elapsedMs: number, familyOf: (dataSource: string) => string = (d) => d, tasksInFile: number | null = null): RunSummary {
  const outcomes: Record<string, number> = {};
  const perTask = new Map<string, { n: number; c: number; rewards: number[] }>();
  const histogram: Record<string, number[]> = {};
  const rewards: number[] = [];
  const byDs: Record<string, { rollouts: number; resolved: number; rewards: number[] }> = {};
  let tokens = 0;
  let sampled = 0;
  let turns = 0;
  let resolved = 0;
  const errors = new Map<string, number>();
  for (const r of rows) {
    outcomes[r.outcome] = (outcomes[r.outcome] ?? 0) + 1;
    // A cancelled sample never finished: counting it anywhere below (pass@k, rates, timings, per
    // family) would understate the run, as if Ctrl-C were a failure of the policy.
    if (r.outcome === 'cancelled') continue;
    if (r.error) errors.set(r.error, (errors.get(r.error) ?? 0) + 1);
    const t = perTask.get(r.taskKey) ?? { n: 0, c: 0, rewards: [] };
    t.n++;
    if (r.resolved) t.c++;
    if (r.reward !== null) t.rewards.push(r.reward);
    perTask.set(r.taskKey, t);
    if (r.reward !== null) {
      const bins = (histogram[familyOf(r.dataSource)] ??= new Array<number>(10).fill(0));
      bins[Math.min(9, Math.max(0, Math.floor(r.reward * 10)))]! += 1;
    }
    if (r.resolved) resolved++;
    if (r.reward !== null) rewards.push(r.reward);
    const ds = (byDs[familyOf(r.dataSource)] ??= { rollouts: 0, resolved: 0, rewards: [] });
    ds.rollouts++;
    if (r.resolved) ds.resolved++;
    if (r.reward !== null) ds.rewards.push(r.reward);
    tokens += r.tokens;
    sampled += r.sampled;
    turns += r.turns;
  }
  const tasks = [...perTask.values()];
  const finishedRows = rows.filter((r) => r.outcome !== 'cancelled');
  const total = finishedRows.length;
  const flagged = flaggedOf(rows);
  return {
    ...(flagged ? { flagged } : {}),
    rollouts: rows.length,
    finished: total,
    tasks: tasks.length,
    tasksInFile,
    n,
    outcomes,
    resolved,
    meanReward: mean(rewards),
    cancelled: outcomes['cancelled'] ?? 0,
    passAt1: mean(tasks.map((t) => passAtK(t.n, t.c, 1))) ?? 0,
    passAtN: mean(tasks.map((t) => passAtK(t.n, t.c, t.n))) ?? 0,
    rewardHistogram: histogram,
    groups: {
      total: n > 1 ? tasks.length : 0,
      noSignal: n > 1 ? tasks.filter((t) => t.rewards.length >= 2 && t.rewards.every((x) => x === t.rewards[0])).length : 0,
    },
    tokensPerTurn: turns > 0 ? sampled / turns : null,
    truncated: outcomes['truncated'] ?? 0,
    timings: {
      queue: stage(finishedRows.map((x) => x.timing.queueMs)),
      init: stage(finishedRows.map((x) => x.timing.initMs)),
      run: stage(finishedRows.map((x) => x.timing.runMs)),
      eval: stage(finishedRows.map((x) => x.timing.evalMs)),
      wall: stage(finishedRows.map((x) => x.timing.wallMs)),
    },
    tokens: { total: tokens, sampled, perRollout: total ? tokens / total : null },
    turns: { total: turns, perRollout: total ? turns / total : null },
    elapsedMs,
    rolloutsPerMinute: elapsedMs > 0 ? (total * 60_000) / elapsedMs : 0,
    errors: [...errors.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, 5)
      .map(([error, count]) => ({ error, count })),
    byDataSource: Object.fromEntries(
      Object.entries(byDs).map(([k, v]) => [k, { rollouts: v.rollouts, resolved: v.resolved, meanReward: mean(v.rewards) }]),
    ),
  };
}

function flaggedOf(rows: SummaryRow[]): RunSummary['flagged'] {
  let rollouts = 0;
  const byKind: Record<string, number> = {};
  for (const r of rows) {
    if (!r.violations) continue;
    rollouts++;
    for (const kind of Object.keys(r.violations)) byKind[kind] = (byKind[kind] ?? 0) + 1;
  }
  return rollouts > 0 ? { rollouts, byKind } : undefined;
}

/** How the summary line names a violation kind. */
const KIND_WORDS: Record<string, string> = {
  'edit-protected': 'edited protected files',
  'delete-protected': 'deleted protected files',
  'create-protected': 'created protected files (conftest.py, sitecustomize.py...)',
  'symlink-protected': 'linked over protected files',
  'read-secret': 'read secrets',
  'exec-denied': 'ran denied programs',
  network: 'tried the network',
};

/** Bin counts as block characters, tallest = the largest bin. */
function sparkline(bins: number[]): string {
  const max = Math.max(1, ...bins);
  return bins.map((b) => (b === 0 ? '·' : '▁▂▃▄▅▆▇█'[Math.min(7, Math.floor((b / max) * 7.999))])).join('');
}

const fmtMs = (v: number | null): string => (v === null ? '-' : v < 10 ? `${v.toFixed(1)} ms` : v < 10_000 ? `${Math.round(v)} ms` : `${(v / 1000).toFixed(1)} s`);
const fmtNum = (v: number | null, digits = 3): string => (v === null ? '-' : v.toFixed(digits));

/** The summary as the plain-text table printed at the end of a run. */
export function formatSummary(s: RunSummary): string {
  const lines: string[] = [];
  const row = (k: string, v: string) => lines.push(`  ${k.padEnd(22)} ${v}`);
  lines.push('', 'Summary', '-------');
  const ofFile = s.tasksInFile !== null && s.tasksInFile !== s.tasks ? ` of ${s.tasksInFile} in the file` : '';
  row('rollouts', `${s.finished} finished (${s.tasks} tasks${ofFile} × n=${s.n})${s.cancelled > 0 ? `, ${s.cancelled} cancelled` : ''}`);
  row('outcomes', Object.entries(s.outcomes).map(([k, v]) => `${k} ${v}`).join(', ') || '-');
  if (s.cancelled > 0) row('cancelled', `${s.cancelled} (not finished: left out of pass@k, rates and timings)`);
  row('resolved', `${s.resolved}/${s.finished}`);
  row('mean reward', fmtNum(s.meanReward));
  row('pass@1', fmtNum(s.passAt1));
  if (s.n > 1) row(`pass@${s.n}`, fmtNum(s.passAtN));
  if (s.groups.total > 0) row('groups with no signal', `${s.groups.noSignal}/${s.groups.total} (all rewards equal: GRPO advantage 0)`);
  if (s.flagged) {
    const kinds = Object.entries(s.flagged.byKind).sort((a, b) => b[1] - a[1]).map(([k, n]) => `${n} ${KIND_WORDS[k] ?? k}`);
    row('integrity', `${s.flagged.rollouts} rollout${s.flagged.rollouts === 1 ? '' : 's'} flagged: ${kinds.join(', ')}`);
  }
  if (s.truncated > 0) row('truncated', `${s.truncated} (max turns, full context or cut by the token limit)`);
  row('tokens', `${s.tokens.total} total, ${s.tokens.sampled} sampled, ${fmtNum(s.tokens.perRollout, 0)} per rollout, ${fmtNum(s.tokensPerTurn, 0)} sampled per turn`);
  row('turns', `${s.turns.total} total, ${fmtNum(s.turns.perRollout, 1)} per rollout`);
  row('elapsed', fmtMs(s.elapsedMs));
  row('rollouts per minute', s.rolloutsPerMinute.toFixed(1));
  lines.push('', `  ${'stage'.padEnd(10)} ${'p50'.padStart(10)} ${'p95'.padStart(10)}`);
  for (const [name, t] of Object.entries(s.timings)) lines.push(`  ${name.padEnd(10)} ${fmtMs(t.p50).padStart(10)} ${fmtMs(t.p95).padStart(10)}`);
  lines.push('', `  ${'task family'.padEnd(14)} ${'rollouts'.padStart(8)} ${'resolved'.padStart(8)} ${'reward'.padStart(8)}`);
  for (const [name, d] of Object.entries(s.byDataSource)) {
    lines.push(`  ${name.padEnd(14)} ${String(d.rollouts).padStart(8)} ${String(d.resolved).padStart(8)} ${fmtNum(d.meanReward).padStart(8)}`);
  }
  const hist = Object.entries(s.rewardHistogram);
  if (hist.length > 0) {
    lines.push('', '  reward histogram (10 bins over [0, 1])');
    for (const [name, bins] of hist) lines.push(`  ${name.padEnd(14)} ${sparkline(bins)}  ${bins.join(' ')}`);
  }
  if (s.errors.length > 0) {
    lines.push('', '  errors');
    for (const e of s.errors) lines.push(`  ${String(e.count).padStart(5)} × ${e.error}`);
  }
  return lines.join('\n') + '\n';
}
