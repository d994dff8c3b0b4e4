import cliProgress from 'cli-progress';
import type { RolloutResult } from '../../protocol/trajectory.js';
import type { RuntimeStatus } from '../../runtime/runtime-api.js';

/** What the progress line shows; pure numbers, so the line can be tested without a terminal. */
export interface ProgressState {
  total: number;
  done: number;
  elapsedMs: number;
  /** Sampled (loss-mask 1) tokens of finished rollouts. */
  sampledTokens: number;
  outcomes: Record<string, number>;
  rewardSum: number;
  rewarded: number;
  stages: { init: number; run: number; eval: number } | null;
}

/** `1:05`, `12:00`, `1:02:03`. */
export function clock(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = String(s % 60).padStart(2, '0');
  return h > 0 ? `${h}:${String(m).padStart(2, '0')}:${sec}` : `${m}:${sec}`;
}

const SHORT: Record<string, string> = { completed: 'ok', truncated: 'trunc', 'timed-out': 'timeout', cancelled: 'cancel', 'infra-error': 'infra', 'task-error': 'task' };

/**
 * The progress line after the bar: done/total, elapsed, ETA, rollouts/s, tokens/s, rollouts in
 * each stage, outcome counts and the running mean reward. Pure.
 */
export function progressLine(p: ProgressState): string {
  const secs = p.elapsedMs / 1000;
  const rate = secs > 0 ? p.done / secs : 0;
  const eta = rate > 0 && p.done < p.total ? clock(((p.total - p.done) / rate) * 1000) : p.done >= p.total ? '0:00' : '?';
  const parts = [
    `${p.done}/${p.total}`,
    `${clock(p.elapsedMs)} elapsed`,
    `ETA ${eta}`,
    `${rate.toFixed(rate < 10 ? 2 : 1)} rollouts/s`,
    `${Math.round(secs > 0 ? p.sampledTokens / secs : 0)} tok/s`,
  ];
  if (p.stages) parts.push(`init ${p.stages.init} run ${p.stages.run} eval ${p.stages.eval}`);
  const outs = Object.entries(p.outcomes).filter(([, n]) => n > 0).map(([k, n]) => `${SHORT[k] ?? k} ${n}`);
  if (outs.length > 0) parts.push(outs.join(' '));
  parts.push(`reward ${p.rewarded > 0 ? (p.rewardSum / p.rewarded).toFixed(3) : '-'}`);
  return parts.join(' · ');
}

/** What a {@link RunProgress} shows and where. */
export interface RunProgressOptions {
  /** Rollouts the run will finish. */
  total: number;
  out: NodeJS.WriteStream;
  /** The runtime's counts (stage occupancy), or null once they are no longer asked for. */
  status: () => RuntimeStatus | null;
  /** Default `Date.now`. */
  now?: () => number;
  /** The plain line's period off a terminal. Default 10 s. */
  plainEveryMs?: number;
}

/**
 * Progress of `rollout run` on stderr, like tqdm: on a terminal a bar redrawn in place (at most
 * 10 times a second); otherwise a plain line every `plainEveryMs` and one at the end, so a log
 * file gets a readable history instead of one line per rollout or thousands of carriage returns.
 */
export class RunProgress {
  private readonly bar: cliProgress.SingleBar | null;
  private readonly state: ProgressState;
  private readonly started: number;
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;

  private readonly out: NodeJS.WriteStream;
  private readonly status: () => RuntimeStatus | null;
  private readonly now: () => number;

  constructor({ total, out, status, now = Date.now, plainEveryMs = 10_000 }: RunProgressOptions) {
    this.out = out;
    this.status = status;
    this.now = now;
    this.started = now();
    this.state = { total, done: 0, elapsedMs: 0, sampledTokens: 0, outcomes: {}, rewardSum: 0, rewarded: 0, stages: null };
    this.bar = out.isTTY
      ? new cliProgress.SingleBar({ stream: out, format: '{bar} {line}', hideCursor: true, clearOnComplete: false, fps: 10, barsize: 24 }, cliProgress.Presets.shades_classic)
      : null;
    if (this.bar) {
      this.bar.start(total, 0, { line: this.line() });
      // Elapsed, ETA and stage counts move between results too.
      this.timer = setInterval(() => this.bar?.update(this.state.done, { line: this.line() }), 500);
    } else {
      this.timer = setInterval(() => this.out.write(`rollout run: ${this.line()}\n`), plainEveryMs);
    }
    this.timer.unref();
  }

  private line(): string {
    this.state.elapsedMs = this.now() - this.started;
    const st = this.status();
    this.state.stages = st ? { init: st.stages.init.active, run: st.stages.run.active, eval: st.stages.eval.active } : null;
    return progressLine(this.state);
  }

  /** Counts one finished rollout. */
  tick(r: RolloutResult): void {
    const s = this.state;
    s.done++;
    s.outcomes[r.outcome] = (s.outcomes[r.outcome] ?? 0) + 1;
    for (const t of r.trajectory.turns) s.sampledTokens += t.outputIds.length;
    if (r.reward !== null) {
      s.rewardSum += r.reward;
      s.rewarded++;
    }
    this.bar?.update(s.done, { line: this.line() });
  }

  /** Draws the last state and stops redrawing. Idempotent. */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    if (this.bar) {
      this.bar.update(this.state.done, { line: this.line() });
      this.bar.stop();
    } else this.out.write(`rollout run: ${this.line()}\n`);
  }
}
