import { homedir, tmpdir } from 'node:os';
import { realpathSync } from 'node:fs';

/**
 * Host directories whose paths must not reach an API client in an error message (issue #9.9):
 * they tell a hostile client where the state dir, the sandboxes' workdirs and the service's files
 * live. Longest first, so a nested one is replaced whole.
 */
function hostDirs(extra: readonly string[]): string[] {
  const dirs = new Set<string>();
  for (const d of [tmpdir(), process.cwd(), homedir(), ...extra]) {
    if (!d || d === '/') continue;
    dirs.add(d);
    try {
      dirs.add(realpathSync(d));
    } catch {
      // A directory that is gone cannot be leaked by its real path either.
    }
  }
  return [...dirs].sort((a, b) => b.length - a.length);
}

let cached: { key: string; dirs: string[] } | null = null;

/**
 * Replaces host paths under the temp dir, the working dir, the home dir (and `extra` dirs) with
 * `<host>`. Paths inside a sandbox (`/workspace/...`) are left alone: they are the policy's own.
 */
export function redactHostPaths(text: string, extra: readonly string[] = []): string {
  const key = extra.join('\0');
  if (!cached || cached.key !== key) cached = { key, dirs: hostDirs(extra) };
  let out = text;
  for (const d of cached.dirs) if (out.includes(d)) out = out.split(d).join('<host>');
  return out;
}
