import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'vitest';
import { createSandboxProvider, type HostSandboxProvider } from '../../../src/sandbox/index.js';
import type { Sandbox } from '../../../src/sandbox/sandbox.js';

/** What the sandbox fork tests share (#26): the freezer check, their provider, a bash step that must succeed. */

/** True when the cgroup v1 freezer controller a fork freezes with is mounted. */
export const freezerMounted = (): boolean => fs.existsSync('/sys/fs/cgroup/freezer/cgroup.procs');

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
