import { parseArgs, type ParseArgsConfig } from 'node:util';

type Options = NonNullable<ParseArgsConfig['options']>;
/** What `parseArgs` gives for these options, with `help` added. */
export type Flags<O extends Options> = ReturnType<typeof parseArgs<{ args: string[]; options: O & { help: { type: 'boolean'; short: 'h' } }; strict: true }>>;

/**
 * The common start of every `rollout` subcommand: strict flag parsing plus `--help`/`-h`.
 * Returns the parsed flags, or the exit code to return at once: 0 after printing `usage` for
 * `--help`, 2 after printing the problem and `usage` for an unknown or malformed flag.
 */
export function parseFlags<const O extends Options>(command: string, argv: string[], options: O, usage: string): Flags<O> | number {
  let parsed: Flags<O>;
  try {
    parsed = parseArgs({ args: argv, options: { ...options, help: { type: 'boolean', short: 'h' } }, strict: true }) as Flags<O>;
  } catch (err) {
    process.stderr.write(`rollout ${command}: ${(err as Error).message}\n\n${usage}`);
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
