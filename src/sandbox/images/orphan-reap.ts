import fs from 'node:fs';
import path from 'node:path';
import { readLease, reapSandbox, sandboxesDir } from '../lease.js';
import { isSameProcessAlive } from '../proc.js';

/**
 * Reaps the sandboxes of this process whose sandbox host is dead: a host killed while it was
 * still closing (the provider's close gives hosts a few seconds) or creating leaves its
 * sandboxes' directories — and, for image sandboxes, mounted overlays — behind. A sandbox of a
 * live host, or of another owner, is never touched. Never throws.
 */
export async function reapDeadHostSandboxes(stateDir: string, ownerPid: number = process.pid): Promise<string[]> {
  let names: string[] = [];
  try {
    names = fs.readdirSync(sandboxesDir(stateDir));
  } catch {
    return [];
  }
  const reaped: string[] = [];
  for (const name of names) {
    const dir = path.join(sandboxesDir(stateDir), name);
    const lease = readLease(dir);
    if (!lease || lease.ownerPid !== ownerPid || isSameProcessAlive(lease.hostPid, lease.hostStart)) continue;
    await reapSandbox(dir);
    reaped.push(name);
  }
  return reaped;
}
