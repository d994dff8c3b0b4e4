import { createWriteStream, type WriteStream } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import cliProgress from 'cli-progress';
import { RolloutError, ValidationError } from '../../errors.js';
import { builtinHandlers } from '../../handlers/builtin.js';
import type { RolloutResult } from '../../protocol/trajectory.js';
import type { SamplingParams } from '../../protocol/instance.js';
import { formatSummary, summarize, toSummaryRow, type RunSummary, type SummaryRow } from './run-summary.js';
import { loadTaskFile } from './run-tasks-file.js';
import { openRunEnvironment, type RunEnvironment } from './run-environment.js';

const USAGE = `usage: rollout run TASKS.jsonl [options]

Runs every task of a JSON Lines file through the embedded runtime, shows progress on stderr,
prints a summary, and writes trajectories.jsonl and summary.json.

options:
  --backend ADDRESS     an inference server (repeatable): http://host:port, vllm+http://...,
                        sglang+http://..., prorl+http://..., or 'scripted' (default: the
                        in-process scripted policy replaying each instance's oracle turns)
  --n N                 samples per task, as a GRPO group (default 1)
  --out DIR             output directory (default ./rollouts-out/<timestamp>)
  --concurrency N       INIT / RUN / EVAL stage limits (default 16)
  --sandbox DRIVER      bwrap | unshare | none | auto (default auto: bwrap when it works)
  --max-iterations N    assistant turns per rollout (default 35)
  --timeout SECONDS     time budget per rollout, counted inside the stages (default 300)
  --image-store DIR     the image store instances' \`image\` is found in (default: $ROLLOUT_IMAGE_STORE,
                        else ~/.cache/rollout-runtime/images; see docs/images.md)
  -h, --help            this text
`;

/** Parsed `rollout run` options. */
export interface RunOptions {
  tasksPath: string;
  backends: string[];
  n: number;
  outDir: string;
  concurrency: number;
  sandbox: 'bwrap' | 'unshare' | 'none' | 'auto';
  maxIterations: number | undefined;
  timeoutS: number | undefined;
}

function positiveInt(name: string, v: string | undefined, dflt: number | undefined): number | undefined {
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new ValidationError(`--${name} must be a positive integer, got '${v}'`, [{ path: name, message: 'positive integer' }]);
  return n;
}

/** A filesystem-safe UTC timestamp, `2026-11-30T03-24-46Z`. */
function stamp(d = new Date()): string {
  return d.toISOString().replace(/\.\d+Z$/, 'Z').replace(/:/g, '-');
}

/**
 * Parses `rollout run` arguments. Returns null for `--help`. Throws ValidationError naming the
 * bad option (unknown flags, a missing TASKS path, non-numeric counts, an unknown driver).
 */
export function parseRunArgs(argv: string[]): RunOptions | null {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        backend: { type: 'string', multiple: true },
        n: { type: 'string' },
        out: { type: 'string' },
        concurrency: { type: 'string' },
        sandbox: { type: 'string' },
        'max-iterations': { type: 'string' },
        timeout: { type: 'string' },
        'image-store': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (err) {
    throw new ValidationError((err as Error).message, [{ path: 'argv', message: (err as Error).message }]);
  }
  const v = parsed.values;
  if (v.help) return null;
  // The sandbox provider reads the store from here (docs/images.md): one line, no option plumbing.
  if (v['image-store']) process.env.ROLLOUT_IMAGE_STORE = resolve(v['image-store']);
  if (parsed.positionals.length !== 1) {
    throw new ValidationError(parsed.positionals.length === 0 ? 'missing the task file (TASKS.jsonl)' : `expected one task file, got ${parsed.positionals.length}`, [
      { path: 'TASKS', message: 'one path' },
    ]);
  }
  const sandbox = v.sandbox ?? 'auto';
  if (!['bwrap', 'unshare', 'none', 'auto'].includes(sandbox)) {
    throw new ValidationError(`--sandbox must be bwrap, unshare, none or auto, got '${sandbox}'`, [{ path: 'sandbox', message: 'unknown driver' }]);
  }
  return {
    tasksPath: parsed.positionals[0] as string,
    backends: v.backend ?? [],
    n: positiveInt('n', v.n, 1) as number,
    outDir: resolve(v.out ?? join('rollouts-out', stamp())),
    concurrency: positiveInt('concurrency', v.concurrency, 16) as number,
    sandbox: sandbox as RunOptions['sandbox'],
    maxIterations: positiveInt('max-iterations', v['max-iterations'], undefined),
    timeoutS: positiveInt('timeout', v.timeout, undefined),
  };
}

/** Progress on stderr: a bar on a terminal, one plain line per finished rollout otherwise. */
class Progress {
  private readonly bar: cliProgress.SingleBar | null;
  private done = 0;
  private resolved = 0;

  constructor(
    private readonly total: number,
    private readonly out: NodeJS.WriteStream,
  ) {
    this.bar = out.isTTY
      ? new cliProgress.SingleBar(
          { stream: out, format: 'rollouts |{bar}| {value}/{total} · resolved {resolved} · {last}', hideCursor: true, clearOnComplete: false },
          cliProgress.Presets.shades_classic,
        )
      : null;
    this.bar?.start(total, 0, { resolved: 0, last: '' });
  }

  tick(r: RolloutResult): void {
    this.done++;
    if (r.resolved) this.resolved++;
    const label = `${r.instanceId ?? r.id}${r.trajectoryId !== null ? `#${r.trajectoryId}` : ''}`;
    if (this.bar) {
      this.bar.update(this.done, { resolved: this.resolved, last: `${label} ${r.outcome}` });
    } else {
      const reward = r.reward === null ? '-' : String(Math.round(r.reward * 1000) / 1000);
      const err = r.error ? ` (${r.error.code}: ${r.error.message.slice(0, 120)})` : '';
      this.out.write(`[${this.done}/${this.total}] ${label} ${r.outcome} reward=${reward}${err}\n`);
    }
  }

  stop(): void {
    this.bar?.stop();
  }
}

function writeLine(stream: WriteStream, value: unknown): Promise<void> {
  return new Promise((res, rej) => {
    stream.write(`${JSON.stringify(value)}\n`, (err) => (err ? rej(err) : res()));
  });
}

/**
 * The main job: loads the tasks, submits each as a group of `n`, streams results to
 * `trajectories.jsonl` as they finish, and returns the summary (also written to `summary.json`).
 * Throws ValidationError on bad input before anything starts. On SIGINT / SIGTERM the live
 * rollouts are cancelled and the summary covers what finished.
 */
export async function runTasks(
  opts: RunOptions,
  io: { stdout: NodeJS.WriteStream; stderr: NodeJS.WriteStream } = { stdout: process.stdout, stderr: process.stderr },
): Promise<RunSummary & { interrupted: boolean }> {
  const known = new Set(builtinHandlers.flatMap((h) => [h.name, ...(h.aliases ?? [])]));
  const tasks = await loadTaskFile(opts.tasksPath, known);
  const env: RunEnvironment = await openRunEnvironment(opts, (line) => io.stderr.write(`rollout run: ${line}\n`));
  const trajPath = join(opts.outDir, 'trajectories.jsonl');
  let stream: WriteStream | undefined;
  let progress: Progress | undefined;
  let interrupted = false;
  // Resolves the submission loop's wait for a free window slot (a result came, or Ctrl-C).
  let wake: (() => void) | null = null;
  const onSignal = () => {
    interrupted = true;
    wake?.();
    io.stderr.write('\nrollout run: interrupted; cancelling live rollouts\n');
    void env.runtime.close({ drain: false });
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    await mkdir(opts.outDir, { recursive: true });
    stream = createWriteStream(trajPath);
    const s = stream;
    const total = tasks.length * opts.n;
    io.stderr.write(`rollout run: ${tasks.length} tasks × n=${opts.n} = ${total} rollouts, ${env.description}\n`);
    progress = new Progress(total, io.stderr);
    const p = progress;
    const started = Date.now();
    const collected: SummaryRow[] = [];
    let writes = Promise.resolve();
    // Submitted through a window rather than all at once: a file of any length stays within the
    // runtime's admission queue, and results stream out while later tasks wait their turn.
    const windowSize = Math.max(opts.concurrency * 4, 64, opts.n);
    let inFlight = 0;
    const pending: Promise<unknown>[] = [];
    for (const [i, t] of tasks.entries()) {
      while (inFlight + opts.n > windowSize && !interrupted) await new Promise<void>((res) => (wake = res));
      if (interrupted) break;
      const sampling: SamplingParams = { ...t.sampling, ...(opts.maxIterations ? { max_iterations: opts.maxIterations } : {}) };
      const results: Promise<RolloutResult>[] =
        opts.n === 1 ? [env.runtime.submit(t.instance, sampling).result] : env.runtime.submitGroup(t.instance, sampling, opts.n).rollouts.map((h) => h.result);
      inFlight += opts.n;
      for (const pr of results) {
        pending.push(
          pr.then((result) => {
            inFlight--;
            collected.push(toSummaryRow(String(i), result));
            p.tick(result);
            // Chained so lines never interleave and the file is complete when the run ends.
            writes = writes.then(() => writeLine(s, { task_index: i, task_line: t.line, ...result }));
            wake?.();
            wake = null;
          }),
        );
      }
    }
    await Promise.all(pending);
    await writes;
    progress.stop();
    const familyOf = (ds: string) => builtinHandlers.find((h) => h.name === ds || h.aliases?.includes(ds))?.name ?? ds;
    const summary = summarize(collected, opts.n, Date.now() - started, familyOf);
    await writeFile(join(opts.outDir, 'summary.json'), `${JSON.stringify({ tasks_file: resolve(opts.tasksPath), backend: env.description, ...summary }, null, 2)}\n`);
    io.stdout.write(formatSummary(summary));
    io.stdout.write(`\n  trajectories: ${trajPath}\n  summary:      ${join(opts.outDir, 'summary.json')}\n`);
    if (interrupted) io.stdout.write('  (interrupted: live rollouts were cancelled)\n');
    return { ...summary, interrupted };
  } finally {
    progress?.stop();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await new Promise<void>((res) => (stream ? stream.end(res) : res()));
    await env.close();
  }
}

/**
 * `rollout run TASKS.jsonl [...]`. Exit 0 when the run completed (failed rollouts included),
 * 2 on bad input (the message names the problem), 1 on a runtime fault, 130 when interrupted
 * (the summary of what finished is still written).
 */
export async function run(argv: string[]): Promise<number> {
  let opts: RunOptions | null;
  try {
    opts = parseRunArgs(argv);
  } catch (err) {
    process.stderr.write(`rollout run: ${(err as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (!opts) {
    process.stdout.write(USAGE);
    return 0;
  }
  try {
    const r = await runTasks(opts);
    return r.interrupted ? 130 : 0;
  } catch (err) {
    process.stderr.write(`rollout run: ${(err as Error).message}\n`);
    return err instanceof ValidationError || (err instanceof RolloutError && err.code === 'TASK') ? 2 : 1;
  }
}
