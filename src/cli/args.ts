import { parseArgs, type ParseArgsConfig } from 'node:util';

type Options = NonNullable<ParseArgsConfig['options']>;
/** What `parseArgs` gives for these options, with `help` added. */
export type Flags<O extends Options> = ReturnType<typeof parseArgs<{ args: string[]; options: O & { help: { type: 'boolean'; short: 'h' } }; strict: true; allowPositionals: boolean }>>;

/**
 * The common start of every `rollout` subcommand: strict flag parsing plus `--help`/`-h`
 * (positional arguments only with `positionals`, e.g. `rollout image rm NAME`).
 * Returns the parsed flags, or the exit code to return at once: 0 after printing `usage` for
 * `--help`, 2 after printing the problem and `usage` for an unknown or malformed flag.
 */
export function parseFlags<const O extends Options>(command: string, argv: string[], options: O, usage: string, opts: { positionals?: boolean } = {}): Flags<O> | number {
  let parsed: Flags<O>;
  try {
    parsed = parseArgs({ args: argv, options: { ...options, help: { type: 'boolean', short: 'h' } }, strict: true, allowPositionals: opts.positionals ?? false }) as Flags<O>;
  } catch (err) {
    process.stderr.write(`rollout ${command}: ${explainFlagError(err, Object.keys(options))}\n\n${usage}`);
    return 2;
  }
  if ((parsed.values as { help?: boolean }).help) {
    process.stdout.write(usage);
    return 0;
  }
  return parsed;
}

/** A usage error of a flag's value; the subcommand prints it and exits 2. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/**
 * Runs the body of a subcommand with sub-subcommands (`rollout image|harness <sub> ...`) and
 * gives its exit code: the body's own, 2 after printing a {@link UsageError} and `usage`, 1 after
 * printing the message of a failed operation (any other error: a missing file, a refused image).
 */
export async function runOperation(command: string, usage: string, body: () => Promise<number>): Promise<number> {
  try {
    return await body();
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`rollout ${command}: ${err.message}\n\n${usage}`);
      return 2;
    }
    process.stderr.write(`rollout ${command}: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  }
}

/**
 * Reads a numeric flag: undefined when absent. Throws {@link UsageError} naming the flag when
 * the value is not a finite number (or, with `integer`, not a non-negative integer).
 */
export function numberFlag(name: string, value: string | undefined, opts: { integer?: boolean } = {}): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || (opts.integer && (!Number.isInteger(n) || n < 0))) {
    throw new UsageError(`--${name} must be ${opts.integer ? 'a non-negative integer' : 'a number'}, got '${value}'`);
  }
  return n;
}

/**
 * Reads a flag that takes one of a few words: undefined when absent. Throws {@link UsageError}
 * naming the flag and every allowed value otherwise: `--protocol must be one of prorl, vllm,
 * sglang, openai, all; got 'x'`.
 */
export function choiceFlag<const T extends string>(name: string, value: string | undefined, allowed: readonly T[]): T | undefined {
  if (value === undefined) return undefined;
  if ((allowed as readonly string[]).includes(value)) return value as T;
  const guess = didYouMean(value, allowed);
  throw new UsageError(`--${name} must be one of ${allowed.join(', ')}; got '${value}'${guess ? ` (did you mean ${guess}?)` : ''}`);
}

/** Edit distance between two short strings (flags, command names). */
function distance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    prev = cur;
  }
  return prev[b.length]!;
}

/**
 * The known name closest to `given` (a typo of at most a third of its length, or a prefix), or
 * null when none is close: `--max-token` → `max-tokens`, `serv` → `serve`.
 */
export function didYouMean(given: string, known: readonly string[]): string | null {
  const g = given.replace(/^-+/, '').split('=')[0]!;
  if (g === '') return null;
  let best: string | null = null;
  let bestD = Infinity;
  for (const k of known) {
    const d = k.startsWith(g) && g.length >= 2 ? 0.5 : distance(g, k);
    if (d < bestD) [best, bestD] = [k, d];
  }
  return bestD <= Math.max(1, Math.floor(g.length / 3)) ? best : null;
}

/**
 * `parseArgs`'s error for an unknown flag, with the closest known flag suggested: `Unknown
 * option '--max-token'. … (did you mean --max-tokens?)`. Other errors pass through.
 */
export function explainFlagError(err: unknown, known: readonly string[]): string {
  const message = err instanceof Error ? err.message : String(err);
  const m = /Unknown option '(-{1,2}[^']+)'/.exec(message);
  if (!m) return message;
  const guess = didYouMean(m[1]!, known);
  return guess ? `unknown option '${m[1]}' (did you mean --${guess}?)` : `unknown option '${m[1]}'`;
}
