import fs from 'node:fs';
import { unshareWorks, type DriverName } from '../../../src/sandbox/drivers.js';
import { toolPresent } from '../../helpers/system-tools.js';

/**
 * The driver the sandbox integration tests use: bwrap when it works; with
 * ROLLOUT_REQUIRE_BWRAP=1 or ROLLOUT_REQUIRE_TOOLS=1 (CI) a missing bwrap is an error
 * (test/helpers/system-tools.ts), otherwise unshare, then none.
 */
export function testDriver(): DriverName {
  // For trying the fallback on a machine that has bwrap: ROLLOUT_TEST_SANDBOX_DRIVER=unshare.
  const forced = process.env.ROLLOUT_TEST_SANDBOX_DRIVER;
  if (forced === 'bwrap' || forced === 'unshare' || forced === 'none') return forced;
  if (toolPresent('bwrap')) return 'bwrap';
  return unshareWorks() ? 'unshare' : 'none';
}

/** Host pids whose command line is exactly `argv` (unique arguments make this unambiguous). */
export function pidsByCmdline(argv: string[]): number[] {
  const want = argv.join('\0');
  const out: number[] = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (fs.readFileSync(`/proc/${name}/cmdline`, 'utf8').replace(/\0$/, '') === want) out.push(Number(name));
    } catch {
      // gone
    }
  }
  return out;
}

/** True when the pid no longer runs (missing, or a zombie waiting to be reaped). */
export function isGone(pid: number): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true;
  }
}

/** Polls `fn` on the event loop (no timing assertion: the test timeout bounds it). */
export async function until<T>(fn: () => T | undefined | null | false | Promise<T | undefined | null | false>, stepMs = 10): Promise<T> {
  for (;;) {
    // Awaited: an async condition is its promise's value, not the (always truthy) promise.
    const v = await fn();
    if (v) return v;
    // The poll step of a wait-until (the state polled has no event), not a synchronising sleep.
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

/**
 * The system Python for test children: a pyenv shim on PATH costs seconds per start on a busy
 * machine and does not pass signals on to Python.
 */
export const PYTHON = fs.existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
