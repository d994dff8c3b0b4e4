import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT } from '../../e2e/service/harness.js';

const spawned = new Set<ChildProcess>();

/** SIGKILLs every worker and gateway this file started that still runs (for afterAll, also after a failed start). */
export async function killSpawned(): Promise<void> {
  await Promise.all(
    [...spawned].map(async (c) => {
      spawned.delete(c);
      if (c.exitCode !== null || c.signalCode !== null) return;
      const gone = new Promise((r) => c.once('exit', r));
      c.kill('SIGKILL');
      await gone;
    }),
  );
}

/** Fast failover for tests: a silent node loses its jobs after about lock + 2 × stalled. */
export const FAST_FAILOVER = ['--lock-ms', '3000', '--stalled-ms', '1000', '--heartbeat-ms', '500'];

/** A `rollout worker` child process with its own state dir (as a separate machine would have). */
export interface WorkerProcess {
  child: ChildProcess;
  stateDir: string;
  stderr(): string;
  /** SIGKILL: the node vanishes without handing anything back. */
  kill9(): Promise<void>;
  /** SIGTERM and wait; answers the exit code. Leaves the state dir. */
  stop(): Promise<number | null>;
}

/** Starts `rollout worker --redis URL`; resolves at `ready`. */
export async function startWorker(redisUrl: string, opts: { capacity: number; stateDir?: string; prefix?: string; sandbox?: string; extra?: string[] }): Promise<WorkerProcess> {
  const stateDir = opts.stateDir ?? mkdtempSync(join(tmpdir(), 'rollout-cluster-worker-'));
  // A loaded 2-core machine starts a sandbox host (a Node process) slowly: generous ceilings. One
  // host per node (the default is one per core): the nodes share one machine here, and each host
  // is one more Node process loading while the cluster starts; one host holds a node's sandboxes.
  const config = join(stateDir, 'worker-config.json');
  writeFileSync(config, JSON.stringify({ sandbox: { hosts: 1, timeouts: { hostStartMs: 120_000 } }, runtime: { retries: { max: 3, backoffMs: 500, backoffMaxMs: 2000 } } }));
  const args = [
    join(ROOT, 'bin/rollout.js'), 'worker', '--redis', redisUrl, '--capacity', String(opts.capacity), '--state-dir', stateDir,
    '--sandbox', opts.sandbox ?? 'auto', '--config', config, ...(opts.prefix ? ['--prefix', opts.prefix] : []), ...FAST_FAILOVER, ...(opts.extra ?? []),
  ];
  const child = spawn(process.execPath, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  spawned.add(child);
  let out = '';
  let err = '';
  child.stderr!.on('data', (d) => (err += d));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  await new Promise<void>((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`worker did not start: ${err}`)), 240_000);
    child.stdout!.on('data', (d) => {
      out += d;
      if (/worker \S+ ready/.test(out)) {
        clearTimeout(timer);
        res();
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      rej(new Error(`worker exited ${code}: ${err}`));
    });
  });
  return {
    child,
    stateDir,
    stderr: () => err,
    async kill9() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      return exited;
    },
  };
}

/** Live (non-zombie) pids whose command line mentions `needle` (a unique temp dir path). */
export function pidsMentioning(needle: string): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d) || Number(d) === process.pid) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      if (stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z')) continue;
      if (readFileSync(`/proc/${d}/cmdline`, 'utf8').includes(needle)) out.push(Number(d));
    } catch {
      // gone
    }
  }
  return out;
}

/** Sandbox directories (leases) still in a state dir. */
export function leftoverSandboxes(stateDir: string): string[] {
  const dir = join(stateDir, 'sandboxes');
  return existsSync(dir) ? readdirSync(dir) : [];
}

/** Removes a state dir. */
export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

/** A shell instance whose oracle runs `command` in the sandbox, then finishes. */
export function shellInstance(id: string, command: string): Record<string, unknown> {
  return {
    data_source: 'shell',
    instance_id: id,
    prompt: `run ${command}`,
    eval_command: 'test -f done.txt',
    oracle: [
      { tool_calls: [{ name: 'execute_bash', arguments: { command: `${command} && touch done.txt` } }] },
      { tool_calls: [{ name: 'finish', arguments: {} }] },
    ],
  };
}

/** A `rollout serve --redis` child (a gateway). */
export interface GatewayProcess {
  url: string;
  child: ChildProcess;
  stderr(): string;
  /** SIGTERM and wait; answers the exit code. */
  stop(): Promise<number | null>;
}

/**
 * Starts `rollout serve --port 0 --redis URL`; resolves at `listening on`. The start-up ceiling
 * is generous: on a loaded 2-core machine loading the sources takes tens of seconds.
 */
export async function startGateway(redisUrl: string, extra: string[] = []): Promise<GatewayProcess> {
  const child = spawn(process.execPath, [join(ROOT, 'bin/rollout.js'), 'serve', '--port', '0', '--redis', redisUrl, ...extra], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  spawned.add(child);
  let out = '';
  let err = '';
  child.stderr!.on('data', (d) => (err += d));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const url = await new Promise<string>((res, rej) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      rej(new Error(`gateway did not start: ${err}`));
    }, 240_000);
    child.stdout!.on('data', (d) => {
      out += d;
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        res(m[1]!);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      rej(new Error(`gateway exited ${code}: ${err}`));
    });
  });
  return {
    url,
    child,
    stderr: () => err,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      return exited;
    },
  };
}

/**
 * POST with retries on a dropped connection (a keep-alive socket the server closed while the
 * request went out): safe here because every submit carries its id, and a resubmit of an id is
 * idempotent in the cluster.
 */
export async function postRetrying(url: string, path: string, body: unknown, tries = 5): Promise<{ status: number; body: any }> {
  for (let i = 1; ; i++) {
    try {
      const res = await fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      const text = await res.text();
      return { status: res.status, body: text ? JSON.parse(text) : undefined };
    } catch (err) {
      if (i >= tries) throw err;
      // A deliberate linear backoff between retries of a dropped connection, not synchronisation.
      await new Promise((r) => setTimeout(r, 100 * i));
    }
  }
}
