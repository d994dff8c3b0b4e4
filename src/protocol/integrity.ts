import { z } from 'zod';

/**
 * The integrity policy of an instance (issue #27): which workspace paths the policy must not
 * touch (`protect`), must not read (`secret`), which programs it must not run (`deny_exec`), and
 * what a violation costs (`on_violation`). The monitor observes (src/sandbox/integrity/), the
 * runtime decides (src/runtime/integrity-cost.ts). See docs/integrity.md.
 */

/** At most this many globs per list: a policy is a handful of rules, not a file listing. */
export const MAX_INTEGRITY_GLOBS = 1_000;
const MAX_GLOB_CHARS = 500;

// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f]/;

/**
 * Compiles a workspace glob to a RegExp over workspace-relative paths (`src/a.py`, no leading
 * slash). The syntax is deliberately small, so "malformed" is well defined:
 * - `*` any characters but `/`; `?` one such character; `**` as a whole segment, any depth
 *   (zero or more directories); `{a,b}` alternatives (not nested); other characters literal;
 * - a glob without `/` matches the file's name at any depth (as in `.gitignore`:
 *   `conftest.py` is every conftest.py); a glob with `/` is anchored at the workspace root;
 * - a glob naming a directory covers what is under it (`.git` covers `.git/config`).
 * @throws Error naming the problem: empty, too long, absolute, `..` (escapes the workspace),
 *   control characters, an empty segment, `**` inside a segment, an unbalanced or nested `{`.
 */
export function compileGlob(glob: string): RegExp {
  if (glob.length === 0) throw new Error('must not be empty');
  if (glob.length > MAX_GLOB_CHARS) throw new Error(`must be at most ${MAX_GLOB_CHARS} characters`);
  if (CONTROL.test(glob)) throw new Error('must not contain control characters');
  if (glob.startsWith('/')) throw new Error('must be relative to the workspace (no leading /)');
  const g = glob.startsWith('./') ? glob.slice(2) : glob.endsWith('/') ? glob.slice(0, -1) : glob;
  const segments = g.split('/');
  if (segments.some((s) => s === '..')) throw new Error("must stay inside the workspace (no '..' segment)");
  if (segments.some((s) => s === '' || s === '.')) throw new Error("must not have an empty or '.' segment");
  const parts = segments.map((seg) => {
    if (seg === '**') return null;
    if (seg.includes('**')) throw new Error("'**' must be a whole path segment");
    return segmentSource(seg);
  });
  let src = '';
  parts.forEach((p, i) => {
    const last = i === parts.length - 1;
    if (p === null) src += last ? '(?:.*)' : '(?:[^/]+/)*';
    else src += p + (last ? '' : '/');
  });
  // Unanchored single segment: any depth. Either way, whatever lies under a match is covered.
  const prefix = segments.length === 1 ? '(?:[^/]+/)*' : '';
  return new RegExp(`^${prefix}${src}(?:/.*)?$`);
}

function segmentSource(seg: string): string {
  let out = '';
  let inBrace = false;
  for (const ch of seg) {
    if (ch === '{') {
      if (inBrace) throw new Error("'{' must not be nested");
      inBrace = true;
      out += '(?:';
    } else if (ch === '}') {
      if (!inBrace) throw new Error("unbalanced '}'");
      inBrace = false;
      out += ')';
    } else if (ch === ',' && inBrace) out += '|';
    else if (ch === '*') out += '[^/]*';
    else if (ch === '?') out += '[^/]';
    else out += ch.replace(/[.+^$()|[\]\\]/g, '\\$&');
  }
  if (inBrace) throw new Error("unbalanced '{'");
  return out;
}

/** A compiled set of globs: `matches(rel)` is true when any glob matches the workspace-relative path. */
export interface GlobSet {
  readonly globs: readonly string[];
  matches(rel: string): boolean;
}

/** Compiles `globs` once into one {@link GlobSet}. @throws Error as {@link compileGlob}. */
export function globSet(globs: readonly string[]): GlobSet {
  const res = globs.map(compileGlob);
  return { globs, matches: (rel) => res.some((re) => re.test(rel)) };
}

const WorkspaceGlobSchema = z.string().superRefine((g, ctx) => {
  try {
    compileGlob(g);
  } catch (e) {
    ctx.addIssue({ code: 'custom', message: `bad glob '${g.slice(0, 80)}': ${(e as Error).message}` });
  }
});

/**
 * A `deny_exec` entry: a program glob, then optionally argument globs, space-separated
 * (`pip`, `/usr/bin/curl`, `python*`, `pip install`, `git log --all`). See {@link execMatcher}.
 */
const ProgramGlobSchema = z
  .string()
  .min(1, 'must not be empty')
  .max(MAX_GLOB_CHARS)
  .refine((g) => !CONTROL.test(g), 'must not contain control characters')
  .refine((g) => g.trim().length > 0, 'must name a program')
  .superRefine((g, ctx) => {
    if (g.trim().length === 0) return; // said above
    try {
      for (const t of g.trim().split(/\s+/)) compileGlob(t.replace(/^\/+/, ''));
    } catch (e) {
      ctx.addIssue({ code: 'custom', message: `bad glob '${g.slice(0, 80)}': ${(e as Error).message}` });
    }
  });

/** Interpreters whose script (or `-m` module) is the program a command line runs. */
const INTERPRETER = /^(python[0-9.]*|pypy[0-9.]*|sh|bash|dash|zsh|perl|ruby|node)$/;

/**
 * Compiles `deny_exec` entries into a matcher over executed command lines. An entry's first
 * word is a program glob, matched against argv[0] as a path (a glob without `/` matches the
 * name: `pip` is `/usr/bin/pip`), and, when argv[0] is an interpreter (python*, sh, bash, perl,
 * node…), against the script it runs or its `-m` module (`pip install` matches
 * `python3 /usr/bin/pip install x` and `python3 -m pip install x`); each further word must match
 * some argument after the program, in any order (`git log --all` matches `git log --oneline --all`).
 * @returns the first matching entry, or null.
 */
export function execMatcher(entries: readonly string[]): (argv: readonly string[]) => string | null {
  const rules = entries.map((entry) => {
    const [prog, ...args] = entry.trim().split(/\s+/) as [string, ...string[]];
    return { entry, prog: compileGlob(prog.replace(/^\/+/, '')), args: args.map((a) => compileGlob(a.replace(/^\/+/, ''))) };
  });
  return (argv) => {
    if (argv.length === 0 || rules.length === 0) return null;
    // Candidate programs and the index where their arguments start.
    const cands: [string, number][] = [[argv[0]!, 1]];
    const base = argv[0]!.slice(argv[0]!.lastIndexOf('/') + 1);
    if (INTERPRETER.test(base)) {
      for (let i = 1; i < argv.length; i++) {
        const a = argv[i]!;
        if (a === '-m' && i + 1 < argv.length) {
          cands.push([argv[i + 1]!, i + 2]);
          break;
        }
        if (a === '-c' || a === '-e') break;
        if (!a.startsWith('-')) {
          cands.push([a, i + 1]);
          break;
        }
      }
    }
    for (const r of rules) {
      for (const [p, from] of cands) {
        if (!r.prog.test(p.replace(/^\/+/, ''))) continue;
        const rest = argv.slice(from);
        if (r.args.every((re) => rest.some((a) => re.test(a)))) return r.entry;
      }
    }
    return null;
  };
}

const globList = <T extends z.ZodTypeAny>(item: T) => z.array(item).max(MAX_INTEGRITY_GLOBS, `must list at most ${MAX_INTEGRITY_GLOBS} globs`);

/** What a violation costs. `flag` records it; `mask` zeroes the loss mask of the turns after it; `zero` sets the reward to 0; `fail` ends the rollout as a task error. */
export const IntegrityActionSchema = z.enum(['flag', 'mask', 'zero', 'fail']);
export type IntegrityAction = z.infer<typeof IntegrityActionSchema>;

/**
 * An instance's `integrity` field. Every list is added to the task family's defaults unless
 * `defaults: false` (then only the instance's own lists apply).
 */
export const IntegrityPolicySchema = z
  .object({
    /** Workspace globs the policy must not create, edit, delete or replace by a link. */
    protect: globList(WorkspaceGlobSchema).default([]),
    /** Workspace globs the policy must not read (observed where the monitor can; see docs/integrity.md). */
    secret: globList(WorkspaceGlobSchema).default([]),
    /** Programs the policy must not run. */
    deny_exec: globList(ProgramGlobSchema).default([]),
    on_violation: IntegrityActionSchema.default('flag'),
    /** False: the family's defaults (SWE: the test files, conftest.py, .git) do not apply. */
    defaults: z.boolean().default(true),
  })
  .strict();
export type IntegrityPolicy = z.output<typeof IntegrityPolicySchema>;

/** A task family's default policy (SWE: the test files, conftest.py, `.git` as secret): literal workspace paths or globs. */
export interface IntegrityDefaults {
  protect: string[];
  secret: string[];
}

/** The kinds of violation the monitor reports. */
export const ViolationKindSchema = z.enum(['edit-protected', 'delete-protected', 'create-protected', 'symlink-protected', 'read-secret', 'exec-denied', 'network']);
export type ViolationKind = z.infer<typeof ViolationKindSchema>;

/** One violation: what, at which turn (the action after assistant turn `turn`), where, and the evidence. */
export const IntegrityViolationSchema = z.object({
  kind: ViolationKindSchema,
  turn: z.number().int(),
  path: z.string().optional(),
  argv: z.array(z.string()).optional(),
  /** A network attempt's address, when the mechanism sees it (see docs/integrity.md). */
  address: z.string().optional(),
  /** A network attempt's protocol (`tcp`, `udp`, `icmp`, `icmpv6`, `ip-N`), with its address. */
  proto: z.string().max(16).optional(),
  detail: z.string(),
});
export type IntegrityViolation = z.infer<typeof IntegrityViolationSchema>;

/** Violations by kind (kind → count), as events and summaries carry them. */
export function violationCounts(violations: readonly Pick<IntegrityViolation, 'kind'>[]): Partial<Record<ViolationKind, number>> {
  const out: Partial<Record<ViolationKind, number>> = {};
  for (const v of violations) out[v.kind] = (out[v.kind] ?? 0) + 1;
  return out;
}

/**
 * A rollout's integrity report. `mode: degraded` when the monitor could not observe all it was
 * asked to (no monitor in this sandbox, the scan bound reached): violations may be missing.
 */
export const IntegrityReportSchema = z.object({
  violations: z.array(IntegrityViolationSchema),
  action: IntegrityActionSchema,
  mode: z.enum(['full', 'degraded']),
  /** Why the mode is degraded, when it is. */
  reason: z.string().optional(),
  /** Actions observed and the monitor's time spent on them, in ms. */
  actions: z.number().int().optional(),
  monitorMs: z.number().optional(),
  /** The programs the agent executed, per action (at most {@link MAX_REPORTED_EXECS}; argv null: it exited before it was read). */
  execs: z.array(z.object({ turn: z.number().int(), argv: z.array(z.string()).nullable() })).optional(),
  /** Executed programs past {@link MAX_REPORTED_EXECS}, counted but not listed. */
  execsDropped: z.number().int().optional(),
});

/** Executed programs a report lists at most. */
export const MAX_REPORTED_EXECS = 200;
export type IntegrityReport = z.infer<typeof IntegrityReportSchema>;

// ---- the sandbox host's monitor (runtime → host) ----

/**
 * Starts (`start`: the baseline, with the protect globs) or runs (`observe`: one scan at `turn`)
 * the file monitor of a sandbox on its host. See src/sandbox/integrity/.
 */
export const SandboxIntegritySchema = z.object({
  type: z.literal('sandbox.integrity'),
  id: z.number().int(),
  sandboxId: z.string(),
  op: z.enum(['start', 'observe']),
  protect: z.array(z.string()).max(2 * MAX_INTEGRITY_GLOBS).optional(),
  /** Secret globs: opens of matching paths are observed (fanotify), with the executed programs. */
  secret: z.array(z.string()).max(2 * MAX_INTEGRITY_GLOBS).optional(),
  turn: z.number().int().optional(),
});

/** What one start or observation of a sandbox's file monitor found. */
export const FileObservationSchema = z.object({
  violations: z.array(IntegrityViolationSchema),
  created: z.number().int(),
  modified: z.number().int(),
  deleted: z.number().int(),
  entries: z.number().int(),
  truncated: z.boolean(),
  ms: z.number(),
  /** Programs the sandbox executed since the last observation (host pid order). */
  execs: z.array(z.object({ argv: z.array(z.string()).nullable() })).optional(),
  /** What this host cannot observe for this sandbox (`exec`: programs run, `reads`: secret reads, `network`: attempts out), and why; the runtime reports `degraded` when its policy needs it. */
  unobserved: z.array(z.object({ what: z.enum(['exec', 'reads', 'network']), why: z.string() })).optional(),
});
export type FileObservationResult = z.infer<typeof FileObservationSchema>;
export const SandboxIntegrityResultSchema = z.object({ type: z.literal('sandbox.integrity.result'), id: z.number().int(), result: FileObservationSchema });
