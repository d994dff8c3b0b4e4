import { accessSync, constants, existsSync, mkdirSync, statfsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { probeBackend, type BackendProbe } from '../llm/backend-probe.js';
import { detectDriver } from '../sandbox/index.js';

/** One pre-flight finding: `fail` stops `doctor` (exit 1), `warn` is worth reading. */
export interface Check {
  name: string;
  status: 'ok' | 'warn' | 'fail';
  detail: string;
}

/** Node's minimum here: `engines` in package.json. */
const MIN_NODE: [number, number] = [20, 19];
/** Below this much free space where sandboxes live, a run of many rollouts may fill the disk. */
const LOW_DISK_BYTES = 2 * 1024 ** 3;

/** The Node version check. Pure apart from reading `process.versions`. */
export function checkNode(version = process.versions.node): Check {
  const [major = 0, minor = 0] = version.split('.').map(Number);
  const ok = major > MIN_NODE[0] || (major === MIN_NODE[0] && minor >= MIN_NODE[1]);
  return { name: 'node', status: ok ? 'ok' : 'fail', detail: ok ? `node ${version}` : `node ${version} is older than ${MIN_NODE.join('.')}: install a newer Node` };
}

/** Which sandbox driver `auto` picks here, and whether it isolates anything. */
export function checkSandbox(): Check {
  const det = detectDriver('auto');
  if (det.driver === 'bwrap') return { name: 'sandbox', status: 'ok', detail: `bwrap: ${det.reason}` };
  if (det.driver === 'unshare') return { name: 'sandbox', status: 'warn', detail: `unshare (weaker than bwrap): ${det.reason}; apt-get install bubblewrap` };
  return { name: 'sandbox', status: 'fail', detail: `${det.reason}; apt-get install bubblewrap` };
}

/**
 * Whether per-sandbox process and memory totals can be enforced: cgroup v1 pids and memory
 * controllers writable by this process (root). Without them only per-process rlimits apply.
 */
export function checkCgroups(root = '/sys/fs/cgroup'): Check {
  const writable = (p: string): boolean => {
    try {
      accessSync(p, constants.W_OK);
      return true;
    } catch {
      return false;
    }
  };
  const pids = writable(`${root}/pids`);
  const memory = writable(`${root}/memory`);
  if (pids && memory) return { name: 'cgroups', status: 'ok', detail: 'pids and memory controllers writable: per-sandbox totals enforced' };
  const missing = [pids ? null : 'pids', memory ? null : 'memory'].filter(Boolean).join(' and ');
  return { name: 'cgroups', status: 'warn', detail: `no writable ${missing} controller under ${root}: per-sandbox totals fall back to per-process limits (run as root for them)` };
}

/** Free space where sandboxes and state live. */
export function checkDisk(dir = tmpdir()): Check {
  try {
    if (!existsSync(dir)) mkdirSync(dir, { recursive: true });
    const st = statfsSync(dir);
    const free = st.bavail * st.bsize;
    const gib = (free / 1024 ** 3).toFixed(1);
    return free < LOW_DISK_BYTES
      ? { name: 'disk', status: 'warn', detail: `${gib} GiB free in ${dir}: sandboxes may fill it` }
      : { name: 'disk', status: 'ok', detail: `${gib} GiB free in ${dir}` };
  } catch (err) {
    return { name: 'disk', status: 'warn', detail: `cannot read free space of ${dir}: ${(err as Error).message}` };
  }
}

/** A backend probe as a check: dead or misconfigured is a failure, a tokenizer not checked is fine. */
export function backendCheck(p: BackendProbe): Check {
  return { name: `backend ${p.address}`, status: p.ok ? 'ok' : 'fail', detail: p.detail };
}

/**
 * Probes every backend address at once (each bounded by `timeoutMs`), so a dead backend costs
 * one timeout, not one per rollout attempt.
 */
export function probeBackends(addresses: readonly string[], opts: { timeoutMs?: number; encode?: (text: string) => number[] } = {}): Promise<BackendProbe[]> {
  return Promise.all(addresses.map((a) => probeBackend(a, opts)));
}

/** `ok`, `warn`, `FAIL` — aligned, greppable, no colour codes in a pipe. */
export function formatCheck(c: Check): string {
  const tag = c.status === 'ok' ? 'ok  ' : c.status === 'warn' ? 'warn' : 'FAIL';
  return `${tag}  ${c.name.padEnd(10)} ${c.detail}`;
}
