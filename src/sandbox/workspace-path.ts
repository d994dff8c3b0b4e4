import path from 'node:path';
import { TaskError } from '../errors.js';

/** Where the workspace appears inside every sandbox. */
export const WORKSPACE = '/workspace';

/** Longest name of one path component in bytes (NAME_MAX of Linux filesystems). */
export const NAME_MAX_BYTES = 255;
/** Longest path in bytes (PATH_MAX): longer paths are useless to the sandbox's own tools. */
export const PATH_MAX_BYTES = 4095;

/**
 * Splits a path the model or an API client gave — absolute under /workspace, relative to it,
 * or (none/unshare drivers) absolute under the host workdir `hostRoot` — into the components
 * below the workspace root, lexically: `.` dropped, `..` applied. `[]` is the root itself.
 *
 * Returns null when the path leaves the workspace (`..` past the root, an absolute path
 * elsewhere) or holds a NUL byte. Symlinks are not looked at here: opening is done component by
 * component without following them (workspace-fs.ts), so this is only the name check.
 */
export function workspaceParts(p: string, hostRoot: string | null = null): string[] | null {
  if (p.includes('\0')) return null;
  let rel: string;
  if (path.posix.isAbsolute(p)) {
    const norm = path.posix.normalize(p);
    if (norm === WORKSPACE) rel = '';
    else if (norm.startsWith(`${WORKSPACE}/`)) rel = norm.slice(WORKSPACE.length + 1);
    else if (hostRoot && (norm === hostRoot || norm.startsWith(`${hostRoot}/`))) rel = norm.slice(hostRoot.length + 1);
    else return null;
  } else rel = p;
  const out: string[] = [];
  for (const c of rel.split('/')) {
    if (c === '' || c === '.') continue;
    if (c === '..') {
      if (out.length === 0) return null;
      out.pop();
    } else out.push(c);
  }
  return out;
}

/** The model-facing form of workspace components: `/workspace/a/b`. */
export function toWorkspacePath(parts: readonly string[]): string {
  return parts.length ? `${WORKSPACE}/${parts.join('/')}` : WORKSPACE;
}

/**
 * Checks the keys of a sandbox spec's `files` (workspace path → content) before anything is
 * made: each must name a file strictly inside the workspace (not `.`, not `/workspace`, no
 * `..` escape, no NUL byte, no trailing `/`), every component at most 255 bytes and the whole
 * at most 4,095, and no key may be another's directory (`a` with `a/b`) or the same file
 * spelt twice (`a` with `./a`).
 *
 * Returns the problems as `{key, problem}`, empty when all are fine. Messages name the key as
 * given (JSON-quoted, so a NUL or newline shows) and never a host path.
 */
export function checkFileKeys(keys: Iterable<string>): { key: string; problem: string }[] {
  const problems: { key: string; problem: string }[] = [];
  const files = new Map<string, string>(); // normalized → key
  for (const key of keys) {
    const problem = keyProblem(key);
    if (problem) {
      problems.push({ key, problem });
      continue;
    }
    const norm = workspaceParts(key)!.join('/');
    const twin = files.get(norm);
    if (twin !== undefined) problems.push({ key, problem: `names the same file as ${JSON.stringify(twin)}` });
    else files.set(norm, key);
  }
  // `a` with `a/b`: with `/` mapped to NUL (never in a key), every key inside `a/` sorts right
  // after `a`, so one pass over neighbours finds each clash in O(n log n), whatever the depth.
  const sorted = [...files].map(([norm, key]) => ({ k: norm.replaceAll('/', '\0'), key })).sort((a, b) => (a.k < b.k ? -1 : a.k > b.k ? 1 : 0));
  for (let i = 0; i + 1 < sorted.length; i++) {
    const a = sorted[i]!;
    const b = sorted[i + 1]!;
    if (b.k.startsWith(`${a.k}\0`)) problems.push({ key: a.key, problem: `is a file, but ${JSON.stringify(b.key)} needs it to be a directory` });
  }
  return problems;
}

function keyProblem(key: string): string | null {
  if (key === '') return 'is empty';
  if (key.includes('\0')) return 'contains a NUL byte';
  if (Buffer.byteLength(key) > PATH_MAX_BYTES) return `is longer than ${PATH_MAX_BYTES} bytes`;
  const parts = workspaceParts(key);
  if (parts === null) return path.posix.isAbsolute(key) ? `is outside ${WORKSPACE}` : `escapes ${WORKSPACE} with '..'`;
  if (parts.length === 0) return `names the workspace root, not a file in it`;
  if (key.endsWith('/')) return 'ends with /: it names a directory, not a file';
  const long = parts.find((c) => Buffer.byteLength(c) > NAME_MAX_BYTES);
  if (long !== undefined) return `has a component longer than ${NAME_MAX_BYTES} bytes (${Buffer.byteLength(long)})`;
  return null;
}

/**
 * The TaskError (code `BAD_FILES`, stage `init`: bad instance data, never retried) for keys
 * {@link checkFileKeys} refused: names each key (the first five; long keys cut) and its problem.
 */
export function fileKeysError(bad: { key: string; problem: string }[]): TaskError {
  const text = bad
    .slice(0, 5)
    .map((b) => `key ${JSON.stringify(b.key.length > 200 ? `${b.key.slice(0, 200)}...` : b.key)} ${b.problem}`)
    .join('; ');
  return new TaskError(`files: ${text}${bad.length > 5 ? `; and ${bad.length - 5} more` : ''}`, {
    code: 'BAD_FILES',
    stage: 'init',
    details: { issues: bad.slice(0, 20).map((b) => ({ key: b.key.slice(0, 200), problem: b.problem })) },
  });
}
