import { writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { RolloutResult } from '../../protocol/trajectory.js';
import { eventFile, type Scalar } from '../tfevents.js';
import { summarize, toSummaryRow, type SummaryRow } from './run-summary.js';

/**
 * A run's per-step metrics as a TensorBoard event file in its output directory (#30 §2), so
 * `tensorboard --logdir rollouts-out` (or any tracker importing TensorBoard logs) charts them
 * without glue.
 *
 * A step is a weight version: a rollout counts at the step of the newest version that sampled
 * its tokens (`maxWeightVersion`), so a run against a trainer that bumps its version charts each
 * metric per trainer step. A label version or none (a fixed server, the oracle) counts at step 0:
 * a trainer that wants steps reports numbers. Per step: `rollouts/finished`,
 * `rollouts/resolved_rate`, `reward/mean`, `reward/<family>` (per data-source family),
 * `response_length/mean` (sampled tokens per rollout), `response_length/per_turn`, `pass@1`,
 * `pass@<n>` (n > 1), `groups/no_signal_fraction` (n > 1), `staleness/mean` and
 * `staleness/max` (when the runtime knew the trainer's version). Cancelled rollouts count
 * nowhere, as in the summary.
 */
export class RunMetrics {
  private readonly byStep = new Map<number, { rows: SummaryRow[]; staleness: number[]; lastAt: number }>();

  constructor(
    private readonly n: number,
    private readonly familyOf: (dataSource: string) => string,
    private readonly now: () => number = Date.now,
  ) {}

  /** Records one finished rollout of task `taskKey`. */
  add(taskKey: string, r: RolloutResult): void {
    if (r.outcome === 'cancelled') return;
    const v = r.trajectory.maxWeightVersion;
    const step = typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : 0;
    let s = this.byStep.get(step);
    if (!s) this.byStep.set(step, (s = { rows: [], staleness: [], lastAt: 0 }));
    s.rows.push(toSummaryRow(taskKey, r));
    if (typeof r.trajectory.staleness === 'number') s.staleness.push(r.trajectory.staleness);
    s.lastAt = this.now();
  }

  /** The scalars of every step, in step order. */
  steps(): { step: number; wallTime: number; scalars: Scalar[] }[] {
    return [...this.byStep.entries()]
      .sort((a, b) => a[0] - b[0])
      .map(([step, s]) => {
        const sum = summarize(s.rows, this.n, 0, this.familyOf);
        const scalars: Scalar[] = [
          { tag: 'rollouts/finished', value: sum.finished },
          { tag: 'rollouts/resolved_rate', value: sum.finished ? sum.resolved / sum.finished : 0 },
          { tag: 'pass@1', value: sum.passAt1 },
        ];
        if (this.n > 1) {
          scalars.push({ tag: `pass@${this.n}`, value: sum.passAtN });
          if (sum.groups.total > 0) scalars.push({ tag: 'groups/no_signal_fraction', value: sum.groups.noSignal / sum.groups.total });
        }
        if (sum.meanReward !== null) scalars.push({ tag: 'reward/mean', value: sum.meanReward });
        for (const [family, d] of Object.entries(sum.byDataSource)) if (d.meanReward !== null) scalars.push({ tag: `reward/${family}`, value: d.meanReward });
        if (sum.finished > 0) scalars.push({ tag: 'response_length/mean', value: sum.tokens.sampled / sum.finished });
        if (sum.tokensPerTurn !== null) scalars.push({ tag: 'response_length/per_turn', value: sum.tokensPerTurn });
        if (s.staleness.length > 0) {
          scalars.push({ tag: 'staleness/mean', value: s.staleness.reduce((a, b) => a + b, 0) / s.staleness.length });
          scalars.push({ tag: 'staleness/max', value: Math.max(...s.staleness) });
        }
        return { step, wallTime: s.lastAt / 1000, scalars };
      });
  }

  /**
   * Writes `events.out.tfevents.<seconds>.<host>` (TensorBoard's own naming) into `dir` and
   * returns its path; `startedAt` (ms since the epoch) names it and dates its first record.
   */
  async write(dir: string, startedAt: number): Promise<string> {
    const path = join(dir, `events.out.tfevents.${Math.floor(startedAt / 1000)}.${hostname()}`);
    await writeFile(path, eventFile(startedAt / 1000, this.steps()));
    return path;
  }
}
