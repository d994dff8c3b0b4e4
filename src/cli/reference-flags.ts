import { UsageError } from './args.js';

/**
 * The flags of the reference server's `start_server.py`, with its argparse semantics (#28), so a
 * launcher written for it (`run_math.py`, the batch profiler) starts `rollout serve` unchanged:
 *
 * | flag | argparse | here |
 * |---|---|---|
 * | `--max-init-workers N`, `--max-run-workers N`, `--max-eval-workers N`, `--timeout S`, `--host H`, `--port P` | one value | ours, same name |
 * | `--allow-skip-eval V` | `type=bool`: any non-empty text is True (`False` too) | no effect, one note |
 * | `--reward-server-ip [IP ...]` | `nargs='*'`: zero or more | no effect, one note |
 * | `--use-thread-based-server` | `store_true` | no effect, one note |
 * | `--llm-server-address [ADDR ...]` | `nargs='*'` | one `--backend ADDR` each |
 *
 * argparse also takes `--flag=value` and a unique prefix of a long flag (`--max-init 4`); both
 * are read here for the reference's flags.
 */
export interface ReferenceArgv {
  /** The command line with the reference-only flags taken out or rewritten into ours. */
  argv: string[];
  /** One line per reference flag that has no meaning here, to print on stderr. */
  notes: string[];
}

const NO_EFFECT: Record<string, string> = {
  'allow-skip-eval': 'every rollout is evaluated by its task handler',
  'reward-server-ip': 'rewards are computed in-process by the task handlers',
  'use-thread-based-server': 'rollouts run as actors in one process and every sandbox is its own process group',
};

/** `nargs` of each reference flag: 1 (one value), '*' (zero or more), 0 (store_true). */
const REFERENCE: Record<string, 1 | '*' | 0> = {
  'max-init-workers': 1,
  'max-run-workers': 1,
  'max-eval-workers': 1,
  timeout: 1,
  host: 1,
  port: 1,
  'allow-skip-eval': 1,
  'reward-server-ip': '*',
  'use-thread-based-server': 0,
  'llm-server-address': '*',
};

/** argparse's test for "this looks like a flag, not a value" (negative numbers are values). */
function isFlag(s: string): boolean {
  return s.startsWith('-') && !/^-\d/.test(s) && s !== '-';
}

/**
 * Rewrites `argv` (see {@link ReferenceArgv}); `ours` are the command's own long flag names, which
 * win over a prefix of a reference flag.
 *
 * @throws UsageError for what argparse refuses too: `--allow-skip-eval` without a value,
 *   `--use-thread-based-server=x`.
 */
export function referenceArgv(argv: readonly string[], ours: readonly string[]): ReferenceArgv {
  const out: string[] = [];
  const notes: string[] = [];
  const noted = new Set<string>();
  const note = (name: string, what: string): void => {
    if (noted.has(name)) return;
    noted.add(name);
    notes.push(`--${name} has no effect (${NO_EFFECT[name]})${what ? `; given ${what}` : ''}`);
  };
  for (let i = 0; i < argv.length; i++) {
    const tok = argv[i]!;
    if (tok === '--') {
      out.push(...argv.slice(i));
      break;
    }
    const m = /^--([^=]+)(?:=(.*))?$/s.exec(tok);
    const name = m ? expand(m[1]!, ours) : undefined;
    if (!m || name === undefined) {
      out.push(tok);
      continue;
    }
    const inline = m[2];
    const nargs = REFERENCE[name]!;
    const values: string[] = [];
    if (nargs === 0) {
      if (inline !== undefined) throw new UsageError(`--${name} takes no value, got '${inline}'`);
    } else if (inline !== undefined) values.push(inline);
    else if (nargs === 1) {
      const next = argv[i + 1];
      if (next === undefined || isFlag(next)) {
        // argparse refuses a missing value; `--allow-skip-eval` alone meant "yes" in our earlier
        // releases, so it stays accepted as that.
        if (name !== 'allow-skip-eval') throw new UsageError(`--${name} expects one value`);
      } else values.push(argv[++i]!);
    } else while (i + 1 < argv.length && !isFlag(argv[i + 1]!)) values.push(argv[++i]!);

    if (name === 'llm-server-address') for (const v of values) out.push('--backend', v);
    else if (name === 'allow-skip-eval') note(name, values.length ? `'${values[0]}', which argparse reads as ${values[0] === '' ? 'False' : 'True'}` : '');
    else if (name in NO_EFFECT) note(name, values.join(' '));
    // `--name=value`: node's parseArgs takes a separate value that starts with '-' as ambiguous.
    else out.push(`--${name}=${values[0]!}`);
  }
  return { argv: out, notes };
}

/**
 * The reference flag `given` names: exactly, or as argparse's unique prefix — unless it is one of
 * our own flags (then it is ours). Undefined when it is not a reference flag.
 */
function expand(given: string, ours: readonly string[]): string | undefined {
  if (given in REFERENCE) return given;
  if (ours.includes(given)) return undefined;
  const hits = Object.keys(REFERENCE).filter((k) => k.startsWith(given));
  return hits.length === 1 && given.length >= 2 ? hits[0] : undefined;
}
