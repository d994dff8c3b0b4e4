import { accessSync, constants, existsSync, realpathSync } from 'node:fs';
import { basename, delimiter, dirname, join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { bwrapWorks } from '../../src/sandbox/drivers.js';

/**
 * The one place a test decides whether a system tool it needs is here (issue #28).
 *
 * A missing tool makes the test skip with one line naming the Debian package to install, so
 * `npm test` on a fresh machine passes with skips. CI installs every tool and sets
 * `ROLLOUT_REQUIRE_TOOLS=1` (or `ROLLOUT_REQUIRE_<TOOL>=1` for one tool, the tool's name upper-cased
 * with `-` as `_`: `ROLLOUT_REQUIRE_BWRAP`, `ROLLOUT_REQUIRE_CHROMIUM`, `ROLLOUT_REQUIRE_REDIS_SERVER`);
 * there a missing tool throws, so it fails the run instead of silently skipping.
 *
 * `scripts/hide-tools.sh` hides every tool listed here (and `.ci/run` runs the test files that
 * import this module under it) to prove the skips stay skips.
 */

/** How a tool is found and which Debian package installs it. */
interface Tool {
  /** The package `apt-get install` takes. */
  pkg: string;
  /** True when the tool is present and usable; defaults to "an executable of that name on PATH". */
  probe?: () => boolean;
  /**
   * What scripts/hide-tools.sh whites out to hide it: absolute paths, or (default) every
   * executable of that name on PATH and in the usual bin dirs; `false` for the tools the
   * suite's core needs (python3 runs every Python REPL, git the SWE tasks), not hidden there.
   */
  hide?: string[] | false;
}

/** Where the browser tests' Debian chromium lives (`ROLLOUT_TEST_CHROMIUM` overrides). */
export const CHROMIUM_PATH = process.env['ROLLOUT_TEST_CHROMIUM'] ?? '/usr/bin/chromium';

const TOOLS = {
  bwrap: { pkg: 'bubblewrap', probe: bwrapWorks },
  chromium: { pkg: 'chromium', probe: () => existsSync(CHROMIUM_PATH), hide: [CHROMIUM_PATH] },
  slirp4netns: { pkg: 'slirp4netns' },
  setfattr: { pkg: 'attr' },
  getfattr: { pkg: 'attr' },
  umoci: { pkg: 'umoci' },
  mmdebstrap: { pkg: 'mmdebstrap' },
  'redis-server': { pkg: 'redis-server' },
  busybox: { pkg: 'busybox-static' },
  zstd: { pkg: 'zstd' },
  'fuse-overlayfs': { pkg: 'fuse-overlayfs' },
  chattr: { pkg: 'e2fsprogs' },
  git: { pkg: 'git', hide: false },
  python3: { pkg: 'python3', probe: () => existsSync('/usr/bin/python3'), hide: false },
  // Debian's pytest for the system Python (the host-root SWE fallback runs /usr/bin/python3 -m pytest).
  pytest: {
    pkg: 'python3-pytest',
    probe: () => spawnSync('/usr/bin/python3', ['-c', 'import pytest'], { stdio: 'ignore' }).status === 0,
    hide: ['/usr/lib/python3/dist-packages/pytest', '/usr/lib/python3/dist-packages/_pytest'],
  },
} satisfies Record<string, Tool>;

/** A system tool some test needs. */
export type ToolName = keyof typeof TOOLS;

/** Every tool this module knows, with its package (for scripts/hide-tools.sh and the docs). */
export const SYSTEM_TOOLS: ReadonlyArray<{ name: ToolName; pkg: string }> = Object.entries(TOOLS).map(([name, t]) => ({ name: name as ToolName, pkg: t.pkg }));

const BIN_DIRS = ['/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin'];

/**
 * The paths scripts/hide-tools.sh whites out so that every hideable tool above looks absent,
 * resolved through symlinked dirs (usr-merge: /bin → /usr/bin), existing ones only.
 */
export function pathsToHide(): string[] {
  const out = new Set<string>();
  for (const [name, t] of Object.entries(TOOLS) as [ToolName, Tool][]) {
    if (t.hide === false) continue;
    const candidates = t.hide ?? [...new Set([...BIN_DIRS, ...(process.env['PATH'] ?? '').split(delimiter).filter((d) => d.startsWith('/'))])].map((d) => join(d, name));
    for (const c of candidates) {
      try {
        out.add(join(realpathSync(dirname(c)), basename(c)));
      } catch {
        // no such dir
      }
    }
  }
  return [...out].filter((p) => existsSync(p)).sort();
}

/** Where an executable named `name` is on PATH, or null. */
export function onPath(name: string): string | null {
  for (const dir of (process.env['PATH'] ?? '').split(delimiter)) {
    if (!dir) continue;
    const file = join(dir, name);
    try {
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      // not here
    }
  }
  return null;
}

const present = new Map<ToolName, boolean>();
const told = new Set<string>();

/** True when the tool is here (probed once per process). */
function has(name: ToolName): boolean {
  let ok = present.get(name);
  if (ok === undefined) {
    const t: Tool = TOOLS[name];
    ok = t.probe ? t.probe() : onPath(name) !== null;
    present.set(name, ok);
  }
  return ok;
}

/** The tool's own variable: `ROLLOUT_REQUIRE_REDIS_SERVER` for `redis-server`. */
export function requireVariable(name: ToolName): string {
  return `ROLLOUT_REQUIRE_${name.toUpperCase().replace(/[^A-Z0-9]/g, '_')}`;
}

/** True when CI asked for this tool to be present (`ROLLOUT_REQUIRE_TOOLS` or the tool's own variable). */
export function toolRequired(name: ToolName): boolean {
  return process.env['ROLLOUT_REQUIRE_TOOLS'] === '1' || process.env[requireVariable(name)] === '1';
}

/**
 * Null when every tool named is here. Otherwise the reason to skip — `needs slirp4netns (apt-get
 * install slirp4netns)` — printed once per process as one line on stderr.
 *
 * @throws Error when a missing tool is required (`ROLLOUT_REQUIRE_TOOLS=1` or its own variable):
 *   in CI a missing tool fails the test file instead of skipping it.
 */
export function missingTools(...names: ToolName[]): string | null {
  const missing = names.filter((n) => !has(n));
  if (missing.length === 0) return null;
  const required = missing.filter(toolRequired);
  const pkgs = [...new Set(missing.map((n) => TOOLS[n].pkg))];
  const why = `needs ${missing.join(', ')} (apt-get install ${pkgs.join(' ')})`;
  if (required.length > 0) {
    throw new Error(`${required.map(requireVariable).join(', ')} (or ROLLOUT_REQUIRE_TOOLS) set but this test ${why}`);
  }
  if (!told.has(why)) {
    told.add(why);
    process.stderr.write(`skipping: ${why}\n`);
  }
  return why;
}

/**
 * True when the tool is here, printing nothing: for a test that falls back to something else
 * (bwrap → the unshare driver) rather than skipping.
 *
 * @throws Error when the tool is missing and required (as {@link missingTools}).
 */
export function toolPresent(name: ToolName): boolean {
  if (has(name)) return true;
  if (toolRequired(name)) missingTools(name);
  return false;
}

/** True when every tool named is here; see {@link missingTools} (same printing, same throw). */
export function haveTools(...names: ToolName[]): boolean {
  return missingTools(...names) === null;
}

/** A describe/it title suffix: ` (skipped: needs …)` when something is missing, else ''. */
export function skipNote(why: string | null): string {
  return why ? ` (skipped: ${why})` : '';
}
