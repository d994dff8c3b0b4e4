import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'vitest';
import { createSandboxProvider, type HostSandboxProvider } from '../../../src/sandbox/index.js';
import type { Sandbox } from '../../../src/sandbox/sandbox.js';
import { missingTools } from '../../helpers/system-tools.js';

/** What the sandbox fork tests share (#26): the freezer check, their provider, a bash step that must succeed. */

/** True when the cgroup v1 freezer controller a fork freezes with is mounted. */
export const freezerMounted = (): boolean => fs.existsSync('/sys/fs/cgroup/freezer/cgroup.procs');

/** True when CI asked for the freezer (`ROLLOUT_REQUIRE_TOOLS=1`, or `ROLLOUT_REQUIRE_FREEZER=1` for it alone), as system-tools.ts does for a tool. */
export const freezerRequired = (): boolean => process.env['ROLLOUT_REQUIRE_TOOLS'] === '1' || process.env['ROLLOUT_REQUIRE_FREEZER'] === '1';

/**
 * Null when `what` (a test file's real forks) can run here: bwrap, root and the cgroup v1
 * freezer. Otherwise why not, warned on stderr. bwrap goes through system-tools.ts; the freezer,
 * a kernel controller rather than a package, obeys the same switch.
 * @throws Error when the freezer is missing (as root) and required ({@link freezerRequired}):
 *   in CI a missing freezer fails the file instead of skipping it.
 */
export function forkSkip(what: string): string | null {
  const tools = missingTools('bwrap');
  if (tools) return tools;
  let why: string | null = null;
  if (process.getuid?.() !== 0) why = 'needs root';
  else if (!freezerMounted()) {
    why = 'needs the cgroup v1 freezer controller (/sys/fs/cgroup/freezer: mount -t cgroup -o freezer freezer /sys/fs/cgroup/freezer)';
    if (freezerRequired()) throw new Error(`ROLLOUT_REQUIRE_FREEZER (or ROLLOUT_REQUIRE_TOOLS) set but ${what} ${why}`);
  }
  if (why) console.warn(`${what} skipped: ${why}`);
  return why;
}

/** A bwrap provider with one host on a fresh state dir under the temp dir (`prefix`), and long tool timeouts for a loaded machine. */
export function forkProvider(prefix: string): { stateDir: string; provider: HostSandboxProvider } {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  return { stateDir, provider: createSandboxProvider({ driver: 'bwrap', hosts: 1, stateDir, timeouts: { bashMs: 20_000, noOutputMs: 20_000, pythonMs: 20_000 } }) };
}

/** Runs `command` in `sb`, expects exit 0, and returns its trimmed output. */
export async function run(sb: Sandbox, command: string): Promise<string> {
  const r = await sb.bash({ command });
  expect(r.exitCode, `${command}: ${r.output}`).toBe(0);
  return r.output.trim();
}
