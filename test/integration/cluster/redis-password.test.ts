import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from '../../e2e/service/harness.js';
import { freePort, redisServerPath } from '../../helpers/redis-server.js';

/**
 * A cluster whose Redis needs a password (#28 §5.8): the gateway's banner must not print it, and
 * both commands take it from the environment or a file so it is not in argv (`ps` shows argv to
 * every user). Real redis-server with `requirepass`, real `rollout serve --redis` and
 * `rollout worker` processes, one rollout end to end.
 */
const bin = redisServerPath();
const PASSWORD = 'p@ss:w/rd#1';
const children: ChildProcess[] = [];
let dir: string;
let port: number;
let redisUrl: string;

function start(args: string[], env: Record<string, string>, until: RegExp): Promise<{ child: ChildProcess; out: () => string; err: () => string }> {
  const child = spawn(process.execPath, [join(ROOT, 'bin/rollout.js'), ...args], { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let out = '';
  let err = '';
  child.stderr!.on('data', (d) => (err += d));
  return new Promise((resolve, reject) => {
    child.stdout!.on('data', (d) => {
      out += d;
      if (until.test(out)) resolve({ child, out: () => out, err: () => err });
    });
    child.once('exit', (code) => reject(new Error(`rollout ${args[0]} exited ${code}: ${out}${err}`)));
  });
}

describe.runIf(bin !== null)('a Redis password kept out of banners and argv (install redis-server to run)', () => {
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'redis-pass-'));
    chmodSync(dir, 0o711);
    port = await freePort();
    const redis = spawn(bin!, ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no', '--requirepass', PASSWORD], { stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(redis);
    await new Promise<void>((resolve, reject) => {
      let out = '';
      redis.stdout!.on('data', (d) => {
        out += d;
        if (/Ready to accept connections/.test(out)) resolve();
      });
      redis.once('exit', (code) => reject(new Error(`redis-server exited ${code}: ${out}`)));
    });
    redisUrl = `redis://127.0.0.1:${port}`;
  });
  afterAll(async () => {
    await Promise.all(
      children.splice(0).map(async (c) => {
        if (c.exitCode !== null || c.signalCode !== null) return;
        const gone = new Promise((r) => c.once('exit', r));
        c.kill('SIGKILL');
        await gone;
      }),
    );
    rmSync(dir, { recursive: true, force: true });
  });

  it('runs a rollout through a gateway given REDIS_PASSWORD and a worker given --redis-password-file; neither prints it nor has it in argv', async () => {
    const file = join(dir, 'redis.pass');
    writeFileSync(file, `${PASSWORD}\n`, { mode: 0o600 });
    const gw = await start(['serve', '--port', '0', '--redis', redisUrl, '--backend', 'oracle'], { REDIS_PASSWORD: PASSWORD }, /cluster\s+gateway on/);
    const url = /listening on (http:\/\/\S+)/.exec(gw.out())![1]!;
    const state = join(dir, 'w1');
    const worker = await start(['worker', '--redis', redisUrl, '--redis-password-file', file, '--capacity', '1', '--state-dir', state, '--sandbox', 'none'], {}, /worker \S+ ready/);
    const res = await fetch(`${url}/process`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ instance: { data_source: 'shell', instance_id: 'pw', prompt: 'p', eval_command: 'true', oracle: [{ tool_calls: [{ name: 'finish', arguments: {} }] }] } }),
    });
    expect(res.status).toBe(200);
    expect((await res.json()).outcome).toBe('completed');
    for (const text of [gw.out(), gw.err(), worker.out(), worker.err()]) expect(text).not.toContain(PASSWORD);
    expect(gw.out()).toContain(`gateway on ${redisUrl}`);
    // argv, as `ps` shows it to everyone: the URL only.
    for (const c of [gw.child, worker.child]) expect(readCmdline(c.pid!)).not.toContain(PASSWORD);
    // Two CLI processes started one after the other, then a rollout through both.
  }, 120_000);

  it('redacts a password given in the URL itself from the banner', async () => {
    const withPass = `redis://:${encodeURIComponent(PASSWORD)}@127.0.0.1:${port}`;
    const gw = await start(['serve', '--port', '0', '--redis', withPass], {}, /cluster\s+gateway on/);
    expect(gw.out()).toContain(`gateway on redis://:***@127.0.0.1:${port}`);
    expect(gw.out()).not.toContain(encodeURIComponent(PASSWORD));
  });

  it('refuses an unreadable password file with exit 2, naming it', async () => {
    const r = spawn(process.execPath, [join(ROOT, 'bin/rollout.js'), 'worker', '--redis', redisUrl, '--redis-password-file', join(dir, 'missing'), '--state-dir', join(dir, 'w2'), '--sandbox', 'none'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(r);
    let err = '';
    r.stderr!.on('data', (d) => (err += d));
    const code = await new Promise((resolve) => r.once('exit', resolve));
    expect(code).toBe(2);
    expect(err).toContain(`cannot read the Redis password file ${join(dir, 'missing')}`);
  });
});

function readCmdline(pid: number): string {
  return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
}
