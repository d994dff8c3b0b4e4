import { createWriteStream, type WriteStream } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join, relative, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { RolloutError, ValidationError } from '../../errors.js';
import { builtinHandlers, familyOf } from '../../handlers/builtin.js';
import type { RolloutResult } from '../../protocol/trajectory.js';
import type { SamplingParams } from '../../protocol/instance.js';
import { formatSummary, summarize, toSummaryRow, type RunSummary, type SummaryRow } from './run-summary.js';
import { loadTaskFile } from './run-tasks-file.js';
import { RunProgress } from './run-progress.js';
import { explainFlagError } from '../args.js';
import { backendCheck, checkDisk, formatCheck, probeBackends } from '../preflight.js';
import { chooseConcurrency } from './run-concurrency.js';
import { RejectionBreaker } from './run-breaker.js';
import { recordEvents } from './run-events.js';
import { RunMetrics } from './run-metrics.js';
import { RUN_FILES, runCodecRecord } from '../../server/run-replay.js';
import { createService, type RolloutService } from '../../server/service.js';
import { serveVisualizer } from '../../server/visualizer-assets.js';
import { listenFailure } from '../listen-error.js';
import { TOOL_PARSER_NAMES } from '../../llm/tool-parsers/index.js';
import { openRunEnvironment, type RunEnvironment } from './run-environment.js';
import { isOracleAddress } from '../../llm/oracle-backend.js';
import { checkStateDir } from '../state-dir-check.js';
import { formatTrees, parseTreeFlag, type TreeFlag } from './run-tree.js';
import { parseTreeOptions, type RolloutTree } from '../../runtime/rollout-tree.js';

const USAGE = `usage: rollout run TASKS.jsonl [options]

Runs every task of a JSON Lines file through the embedded runtime, shows progress on stderr,
prints a summary, and writes trajectories.jsonl, summary.json and a TensorBoard event file
(events.out.tfevents.*: per-step metrics, a step being the weight version).

options:
  --backend ADDRESS     an inference server (repeatable): http://host:port, vllm+http://...,
                        sglang+http://..., prorl+http://..., or 'oracle' (default: the
                        in-process oracle backend replaying each instance's oracle turns)
  --n N                 samples per task, as a GRPO group (default 1)
  --tree RxW@T[,T…]     tree rollouts: R roots per task, each forked into W branches at turn
                        boundary T (T assistant turns sampled), again at each further T; a node
                        that forks stops there. Prints each tree with rewards per node and per
                        branch point the mean ± spread of its children (docs/core.md)
  --out DIR             output directory (default ./rollouts-out/<timestamp>)
  --concurrency N       INIT / RUN / EVAL stage limits (default: the engines' slots summed, when
                        every backend reports them at /props or /get_server_info; else 16)
  --sandbox DRIVER      bwrap | unshare | none | auto (default auto: bwrap when it works)
  --max-iterations N    assistant turns per rollout (default 35)
  --max-tokens N        sampled tokens per assistant turn (default: what the context leaves)
  --temperature T       sampling temperature, 0..2 (default: each task's, else 1)
  --top-p P             nucleus sampling, in (0, 1] (default: each task's, else 1)
  --timeout SECONDS     time budget per rollout, counted inside the stages (default 300)
  --tokenizer DIR       Hugging Face model directory (tokenizer.json, tokenizer_config.json) whose
                        tokenizer and chat template rollouts use (default: Qwen3)
  --tool-parser NAME    tool-call format: hermes | qwen3_coder | llama3_json | mistral | deepseek_v3 | openai
                        (default: the one the chat template writes)
  --image-store DIR     the image store instances' \`image\` is found in (default: $ROLLOUT_IMAGE_STORE,
                        else ~/.cache/rollout-runtime/images; see docs/images.md)
  --visualize           serve the live visualizer page of this run while it runs (URL on stderr);
                        afterwards the run opens with  rollout view DIR
  --visualize-port P    its port (default 0: a free one), on 127.0.0.1
  -h, --help            this text

Before it starts, every --backend is probed (reachable, protocol fits the server); a dead or
mismatched one is left out with one line saying why, and the run stops at once when none is
left. Ctrl-C once: stop submitting, cancel live rollouts, write the summary; twice: exit now.
Exit status: 0 done, 1 every rollout failed for infrastructure reasons or no backend answers,
2 bad usage, 130 interrupted.
`;

/** Parsed `rollout run` options. */
export interface RunOptions {
  tasksPath: string;
  /** `--visualize`: the live page's port (0: a free one); undefined without the flag. */
  visualizePort?: number | undefined;
  /** `--tokenizer DIR` / `--tool-parser NAME` (#17). */
  tokenizer?: string | undefined;
  toolParser?: string | undefined;
  backends: string[];
  n: number;
  outDir: string;
  /** `--concurrency`; undefined: matched to the engines' slots (run-concurrency.ts). */
  concurrency: number | undefined;
  sandbox: 'bwrap' | 'unshare' | 'none' | 'auto';
  maxIterations: number | undefined;
  timeoutS: number | undefined;
  /** Sampling overrides from the command line, applied on top of each task's own. */
  sampling: { max_tokens?: number; temperature?: number; top_p?: number };
  /** `--tree RxW@T[,T…]` (#26): each task grows R trees; `n` is then R. */
  tree?: TreeFlag | undefined;
}

/** A number flag within [min, max] (`open` excludes min); ValidationError naming the flag and its range. */
function rangeFlag(name: string, v: string | undefined, min: number, max: number, openMin = false): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n) || (openMin ? n <= min : n < min) || n > max) {
    const range = `${openMin ? '(' : '['}${min}, ${max}]`;
    throw new ValidationError(`--${name} must be a number in ${range}, got '${v}'`, [{ path: name, message: `in ${range}` }]);
  }
  return n;
}

function positiveInt(name: string, v: string | undefined, dflt: number | undefined): number | undefined {
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new ValidationError(`--${name} must be a positive integer, got '${v}'`, [{ path: name, message: 'positive integer' }]);
  return n;
}

function nonNegativeInt(name: string, v: string | undefined, dflt: number): number {
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n > 65_535) throw new ValidationError(`--${name} must be a port number (0..65535), got '${v}'`, [{ path: name, message: 'port' }]);
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
        tree: { type: 'string' },
        out: { type: 'string' },
        concurrency: { type: 'string' },
        sandbox: { type: 'string' },
        'max-iterations': { type: 'string' },
        'max-tokens': { type: 'string' },
        temperature: { type: 'string' },
        'top-p': { type: 'string' },
        timeout: { type: 'string' },
        tokenizer: { type: 'string' },
        'tool-parser': { type: 'string' },
        'image-store': { type: 'string' },
        visualize: { type: 'boolean' },
        'visualize-port': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (err) {
    const known = ['backend', 'n', 'tree', 'out', 'concurrency', 'sandbox', 'max-iterations', 'max-tokens', 'temperature', 'top-p', 'timeout', 'tokenizer', 'tool-parser', 'image-store', 'visualize', 'visualize-port', 'help'];
    const message = explainFlagError(err, known);
    throw new ValidationError(message, [{ path: 'argv', message }]);
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
  if (v['tool-parser'] !== undefined && !TOOL_PARSER_NAMES.includes(v['tool-parser'])) {
    throw new ValidationError(`--tool-parser must be one of ${TOOL_PARSER_NAMES.join(', ')}; got '${v['tool-parser']}'`, [{ path: 'tool-parser', message: 'unknown tool parser' }]);
  }
  const backends = v.backend ?? [];
  const real = backends.filter((b) => !isOracleAddress(b));
  if (real.length > 0 && real.length < backends.length) {
    const message = `--backend oracle replays each instance's oracle turns and cannot be mixed with a real backend (${real.join(', ')}): give one or the other`;
    throw new ValidationError(message, [{ path: 'backend', message: 'oracle mixed with real backends' }]);
  }
  const sandbox = v.sandbox ?? 'auto';
  if (!['bwrap', 'unshare', 'none', 'auto'].includes(sandbox)) {
    throw new ValidationError(`--sandbox must be bwrap, unshare, none or auto, got '${sandbox}'`, [{ path: 'sandbox', message: 'unknown driver' }]);
  }
  const tree = v.tree === undefined ? undefined : parseTreeFlag(v.tree);
  if (tree && v.n !== undefined && Number(v.n) !== tree.roots) {
    throw new ValidationError(`--n ${v.n} and --tree ${v.tree} disagree: the tree's R is the roots per task (leave --n out)`, [{ path: 'n', message: 'conflicts with --tree' }]);
  }
  return {
    tasksPath: parsed.positionals[0] as string,
    backends,
    n: tree?.roots ?? (positiveInt('n', v.n, 1) as number),
    tree,
    outDir: resolve(v.out ?? join('rollouts-out', stamp())),
    concurrency: positiveInt('concurrency', v.concurrency, undefined),
    sandbox: sandbox as RunOptions['sandbox'],
    maxIterations: positiveInt('max-iterations', v['max-iterations'], undefined),
    timeoutS: positiveInt('timeout', v.timeout, undefined),
    sampling: dropUndefined({
      max_tokens: positiveInt('max-tokens', v['max-tokens'], undefined),
      temperature: rangeFlag('temperature', v.temperature, 0, 2),
      top_p: rangeFlag('top-p', v['top-p'], 0, 1, true),
    }),
    tokenizer: v.tokenizer,
    toolParser: v['tool-parser'],
    visualizePort: v.visualize || v['visualize-port'] !== undefined ? nonNegativeInt('visualize-port', v['visualize-port'], 0) : undefined,
  };
}

function dropUndefined<T extends Record<string, unknown>>(o: T): { [K in keyof T]?: Exclude<T[K], undefined> } {
  return Object.fromEntries(Object.entries(o).filter(([, x]) => x !== undefined)) as { [K in keyof T]?: Exclude<T[K], undefined> };
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
): Promise<RunSummary & { interrupted: boolean; rejected: string | null }> {
  const known = new Set(builtinHandlers.flatMap((h) => [h.name, ...(h.aliases ?? [])]));
  const tasks = await loadTaskFile(opts.tasksPath, known);
  const { backends, slots, contextLength } = await preflight(opts.backends, io.stderr);
  if (contextLength !== null) checkContext(contextLength, opts.sampling, tasks);
  // doctor's disk check: a run of many sandboxes can fill a small disk; say so before, not after.
  const disk = checkDisk();
  if (disk.status !== 'ok') io.stderr.write(`rollout run: ${formatCheck(disk)}\n`);
  const { concurrency, reason } = chooseConcurrency(opts.concurrency, slots);
  const env: RunEnvironment = await openRunEnvironment({ ...opts, backends, concurrency }, (line) => io.stderr.write(`rollout run: ${line}\n`));
  const trajPath = join(opts.outDir, 'trajectories.jsonl');
  let stream: WriteStream | undefined;
  let progress: RunProgress | undefined;
  let interrupted = false;
  // Resolves the submission loop's wait for a free window slot (a result came, or Ctrl-C).
  let wake: (() => void) | null = null;
  // First Ctrl-C: stop submitting, cancel what is live (sandboxes closed), write the summary.
  // Second: the user wants out now.
  const onSignal = () => {
    if (interrupted) {
      io.stderr.write('\nrollout run: interrupted twice; exiting without waiting\n');
      process.exit(130);
    }
    interrupted = true;
    wake?.();
    // The progress line is drawn for the last time first, so the message goes below it instead
    // of being redrawn over (or drawing over it) while the cancels finish.
    progress?.stop();
    io.stderr.write(`${io.stderr.isTTY ? '' : '\n'}rollout run: interrupted; cancelling live rollouts (Ctrl-C again to exit at once)\n`);
    void env.runtime.close({ drain: false });
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  // A backend that rejects every request ends the run after the first few (run-breaker.ts).
  const breaker = new RejectionBreaker();
  let rejected: string | null = null;
  let recorder: { stop(): Promise<void> } | undefined;
  let live: RolloutService | undefined;
  try {
    await mkdir(opts.outDir, { recursive: true });
    recorder = recordEvents(env.runtime, join(opts.outDir, RUN_FILES.events));
    if (opts.visualizePort !== undefined) {
      // The live page of this run: the ordinary service around the run's own runtime.
      live = createService({ createRuntime: () => Promise.resolve(env.runtime), visualizer: serveVisualizer }, { host: '127.0.0.1', port: opts.visualizePort });
      const url = await live.listen().catch((err: unknown) => {
        throw new ValidationError(`--visualize: ${(err as NodeJS.ErrnoException).syscall === 'listen' ? listenFailure(err, '127.0.0.1', opts.visualizePort!) : (err as Error).message}`, [{ path: 'visualize-port', message: 'cannot listen' }]);
      });
      io.stderr.write(`rollout run: live visualizer at ${url}/visualizer\n`);
    }
    stream = createWriteStream(trajPath);
    const s = stream;
    // A tree grows every node it can (a rollout that stops before a branch turn grows fewer).
    const perTask = opts.tree ? parseTreeOptions(opts.tree.tree, opts.n).nodes : opts.n;
    const total = tasks.length * perTask;
    const trees: { task: string; tree: RolloutTree }[] = [];
    io.stderr.write(`rollout run: ${tasks.length} tasks × n=${opts.n} = ${total} rollouts, ${env.description}, concurrency ${concurrency} (${reason})\n`);
    progress = new RunProgress({ total, out: io.stderr, status: () => (interrupted ? null : env.runtime.status()) });
    const p = progress;
    const started = Date.now();
    const collected: SummaryRow[] = [];
    const metrics = new RunMetrics(opts.n, (ds) => familyOf(ds));
    let writes = Promise.resolve();
    // Submitted through a window rather than all at once: a file of any length stays within the
    // runtime's admission queue, and results stream out while later tasks wait their turn.
    const windowSize = Math.max(concurrency * 4, 64, perTask);
    let inFlight = 0;
    const pending: Promise<unknown>[] = [];
    for (const [i, t] of tasks.entries()) {
      while (inFlight + perTask > windowSize && !interrupted && rejected === null) await new Promise<void>((res) => (wake = res));
      if (interrupted || rejected !== null) break;
      const sampling: SamplingParams = { ...t.sampling, ...opts.sampling, ...(opts.maxIterations ? { max_iterations: opts.maxIterations } : {}) };
      // The engine's context bounds ours: the runtime then stops a rollout at a full context
      // itself (truncated, honest) instead of being refused by the engine.
      if (contextLength !== null) sampling.max_model_len = Math.min(sampling.max_model_len ?? contextLength, contextLength);
      let results: Promise<RolloutResult>[];
      if (opts.tree) {
        // A tree's nodes are known once it has grown: its results come together, its tree after.
        const g = env.runtime.submitGroup(t.instance, sampling, opts.n, { tree: opts.tree.tree });
        const all = g.results;
        results = Array.from({ length: perTask }, (_, k) => all.then((rs) => rs[k] ?? null)) as Promise<RolloutResult>[];
        pending.push(g.tree!.then((tree) => void trees.push({ task: String(i), tree }), () => undefined));
      } else results = opts.n === 1 ? [env.runtime.submit(t.instance, sampling).result] : env.runtime.submitGroup(t.instance, sampling, opts.n).rollouts.map((h) => h.result);
      inFlight += perTask;
      for (const pr of results) {
        pending.push(
          pr.then((result) => {
            inFlight--;
            // A tree that grew fewer nodes than it could (a rollout ended before a branch turn).
            if (result === null) {
              wake?.();
              wake = null;
              return;
            }
            if (breaker.observe(result)) {
              rejected = breaker.reason;
              p.stop();
              io.stderr.write(`rollout run: ${rejected}; stopping the run\n`);
              wake?.();
              // Starts the cancels now; the command's end awaits the same close (env.close).
              void env.runtime.close({ drain: false });
            }
            // A tree node that forked is continued by its children: the summary counts them, not it.
            if (result.finish !== 'forked') {
              collected.push(toSummaryRow(String(i), result));
              metrics.add(String(i), result);
            }
            p.tick(result);
            // A failure is worth a line of its own in a log; successes are in the progress line.
            if (!io.stderr.isTTY && result.error && result.outcome !== 'cancelled') {
              io.stderr.write(`rollout run: ${result.instanceId ?? result.id}${result.trajectoryId !== null ? `#${result.trajectoryId}` : ''} ${result.outcome}: ${result.error.code}: ${result.error.message.slice(0, 200)}\n`);
            }
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
    const summary = summarize(collected, opts.n, Date.now() - started, (ds) => familyOf(ds), tasks.length);
    await writeFile(join(opts.outDir, 'summary.json'), `${JSON.stringify({ tasks_file: resolve(opts.tasksPath), backend: env.description, ...runCodecRecord(opts.tokenizer, opts.toolParser), ...summary }, null, 2)}\n`);
    const metricsPath = await metrics.write(opts.outDir, started);
    io.stdout.write(formatSummary(summary));
    if (opts.tree) {
      trees.sort((a, b) => Number(a.task) - Number(b.task));
      io.stdout.write(formatTrees(trees));
      // The shared prefixes the branches' trajectories reference (trajectory.prefix.id), each once.
      const prefixes = Object.assign({}, ...trees.map((x) => x.tree.prefixes)) as Record<string, unknown>;
      await writeFile(join(opts.outDir, 'prefixes.jsonl'), Object.entries(prefixes).map(([id, trajectory]) => JSON.stringify({ id, trajectory }) + '\n').join(''));
      await writeFile(join(opts.outDir, 'trees.json'), `${JSON.stringify(trees.map((x) => ({ task_index: Number(x.task), group_id: x.tree.groupId, roots: x.tree.roots, nodes: x.tree.nodes })), null, 2)}\n`);
    }
    io.stdout.write(`\n  trajectories: ${trajPath}\n  summary:      ${join(opts.outDir, 'summary.json')}\n  metrics:      ${metricsPath} (tensorboard --logdir)\n  view it:      rollout view ${relativeOrAbsolute(opts.outDir)}\n`);
    if (interrupted) io.stdout.write(`  (interrupted: ${summary.cancelled} live rollouts were cancelled, ${total - collected.length} never started)\n`);
    return { ...summary, interrupted, rejected };
  } finally {
    progress?.stop();
    await recorder?.stop();
    await live?.close();
    await new Promise<void>((res) => (stream ? stream.end(res) : res()));
    await env.close();
    // Once interrupted the process is on its way out: a second Ctrl-C during the cleanup above or
    // after it still exits at once (130, with its line), instead of the signal's default death.
    if (!interrupted) {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    }
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
    // A state dir the sandbox uid cannot reach would fail every rollout (#28 §4).
    checkStateDir();
  } catch (err) {
    process.stderr.write(`rollout run: ${(err as Error).message}\n`);
    return 2;
  }
  try {
    const r = await runTasks(opts);
    if (r.interrupted) return 130;
    if (r.rejected !== null) {
      process.stderr.write(`rollout run: ${r.rejected}\n`);
      return 1;
    }
    // Nothing was learned from a run whose every rollout hit an infrastructure fault.
    if (r.rollouts > 0 && (r.outcomes['infra-error'] ?? 0) === r.rollouts) {
      process.stderr.write(`rollout run: every rollout failed for infrastructure reasons (${r.errors[0]?.error ?? 'see the summary'})\n`);
      return 1;
    }
    return 0;
  } catch (err) {
    if (err instanceof NoBackendError) {
      process.stderr.write(`rollout run: ${err.message}\n`);
      return 1;
    }
    process.stderr.write(`rollout run: ${(err as Error).message}\n`);
    return err instanceof ValidationError || (err instanceof RolloutError && err.code === 'TASK') ? 2 : 1;
  }
}

/** No --backend answered the pre-flight probe. */
class NoBackendError extends Error {
  override readonly name = 'NoBackendError';
}

/**
 * Probes the real backends before anything starts (in parallel, each bounded), prints one line
 * per backend that cannot be used, and returns the usable ones. Throws {@link NoBackendError}
 * when real backends were named and none works, so a dead fleet costs seconds, not every
 * rollout's retries. Built-in policies (`scripted`, `oracle`) and no backend pass through.
 */
async function preflight(addresses: string[], err: NodeJS.WriteStream): Promise<{ backends: string[]; slots: (number | null)[]; contextLength: number | null }> {
  const real = addresses.filter((a) => !isOracleAddress(a));
  if (real.length === 0) return { backends: addresses, slots: [], contextLength: null };
  const probes = await probeBackends(real, { timeoutMs: 5000 });
  const usable: string[] = [];
  const slots: (number | null)[] = [];
  for (const p of probes) {
    if (p.ok || p.spec === null) {
      usable.push(p.address); // a malformed address is the runtime's ValidationError (exit 2)
      slots.push(p.slots);
    } else err.write(`rollout run: ${formatCheck(backendCheck(p))}\n`);
  }
  if (usable.length === 0) throw new NoBackendError(`no backend answers (${real.length} probed): giving up before starting any rollout`);
  // The smallest context any usable engine states: a call may land on any of them.
  const known = probes.filter((p) => p.ok && p.contextLength !== null).map((p) => p.contextLength as number);
  return { backends: usable, slots, contextLength: known.length > 0 ? Math.min(...known) : null };
}

/**
 * Refuses, before any rollout starts, a `max_tokens` (the flag's or a task line's) that the
 * engine's context cannot hold: every call would be refused or sample nothing, and each rollout
 * would end with nothing learned. Throws {@link NoBackendError} (exit 1) with the numbers.
 */
function checkContext(contextLength: number, flags: Partial<SamplingParams>, tasks: readonly { line: number; sampling: SamplingParams | undefined }[]): void {
  const tooBig = (n: number | undefined): n is number => n !== undefined && n >= contextLength;
  if (tooBig(flags.max_tokens)) {
    throw new NoBackendError(`--max-tokens ${flags.max_tokens} does not fit the engine's context of ${contextLength} tokens (prompt included): use a --max-tokens below ${contextLength}`);
  }
  const perTurn = (t: { sampling: SamplingParams | undefined }) => t.sampling?.max_output_tokens ?? t.sampling?.max_tokens;
  const line = flags.max_tokens === undefined ? tasks.find((t) => tooBig(perTurn(t))) : undefined;
  if (line) throw new NoBackendError(`task line ${line.line}: max_tokens ${perTurn(line)} does not fit the engine's context of ${contextLength} tokens (prompt included)`);
}

/** `dir` relative to the working directory when it lies below it (shorter to type), else absolute. */
function relativeOrAbsolute(dir: string): string {
  const rel = relative(process.cwd(), dir);
  return rel && !rel.startsWith('..') ? rel : dir;
}
