import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { missingTools, onPath } from './system-tools.js';

/**
 * Where Debian's redis-server lives, or null: then the cluster tests skip with the install line
 * (test/helpers/system-tools.ts), and under ROLLOUT_REQUIRE_REDIS_SERVER=1 or
 * ROLLOUT_REQUIRE_TOOLS=1 (CI) this throws instead.
 */
export function redisServerPath(): string | null {
  return missingTools('redis-server') === null ? onPath('redis-server') : null;
}

/** A free loopback TCP port (bound and released; redis-server binds it right after). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** A redis-server child on a loopback port with its own temp dir. */
export interface TestRedis {
  url: string;
  port: number;
  dir: string;
  child: ChildProcess;
  /** SIGKILL (no shutdown save) and wait for exit: the data dir stays for a restart. */
  kill(): Promise<void>;
  /** Starts it again on the same port and dir (with AOF it reloads what it had). */
  restart(): Promise<void>;
  /** Stops it and removes the dir. */
  stop(): Promise<void>;
}

/**
 * Starts `redis-server --port P --bind 127.0.0.1 --dir TMP --save ''` with AOF on or off
 * (`appendfsync always` when on, so an acknowledged write survives a kill). Resolves once it
 * accepts connections. Call {@link TestRedis.stop} in afterAll.
 */
export async function startRedis(opts: { appendonly?: boolean } = {}): Promise<TestRedis> {
  const bin = redisServerPath();
  if (!bin) throw new Error('redis-server not found: apt-get install redis-server');
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'rollout-redis-'));
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--daemonize', 'no', '--appendonly', opts.appendonly ? 'yes' : 'no'];
  if (opts.appendonly) args.push('--appendfsync', 'always');
  let child: ChildProcess;
  const launch = async (): Promise<void> => {
    child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`redis-server did not start: ${out}`)), 10_000);
      const onData = (d: Buffer): void => {
        out += d.toString();
        if (/Ready to accept connections/.test(out)) {
          clearTimeout(timer);
          resolve();
        }
      };
      child.stdout!.on('data', onData);
      child.stderr!.on('data', onData);
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`redis-server exited ${code}: ${out}`));
      });
    });
    child.stdout!.resume();
    child.stderr!.resume();
  };
  const kill = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise<void>((r) => child.once('exit', () => r()));
    child.kill('SIGKILL');
    await gone;
  };
  await launch();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    dir,
    get child() {
      return child;
    },
    kill,
    restart: launch,
    async stop() {
      await kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
