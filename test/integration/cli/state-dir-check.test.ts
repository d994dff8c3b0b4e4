import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { redisServerPath, startRedis, type TestRedis } from '../../helpers/redis-server.js';

/**
 * A state dir the sandbox uid cannot traverse (a `mktemp -d`, mode 0700) fails every sandbox with
 * STATE_DIR_UNREACHABLE. `rollout worker`, `serve` and `run` say so at start-up and exit 2 — a
 * worker never joins the queue to fail every job it takes (#28 §4). As root only: otherwise the
 * sandboxes run as this uid and the dir is reachable.
 */
const repo = fileURLToPath(new URL('../../../', import.meta.url));
const bin = join(repo, 'bin', 'rollout.js');
const isRoot = process.getuid?.() === 0;
const procs: ChildProcess[] = [];
let outer: string;
let redis: TestRedis | undefined;

/** Runs `rollout ...args` to its exit (or until `readyLine` is printed, then SIGTERM). */
function rollout(args: string[], env: Record<string, string> = {}, readyLine?: RegExp): Promise<{ code: number | null; out: string; err: string; ready: boolean }> {
  const proc = spawn(process.execPath, [bin, ...args], { cwd: repo, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  procs.push(proc);
  let out = '';
  let err = '';
  let ready = false;
  proc.stdout!.on('data', (d: Buffer) => {
    out += d.toString();
    if (readyLine && !ready && readyLine.test(out)) {
      ready = true;
      proc.kill('SIGTERM');
    }
  });
  proc.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  return new Promise((resolve) => proc.once('exit', (code) => resolve({ code, out, err, ready })));
}

describe.runIf(isRoot)('a state dir the sandbox uid cannot reach, at start-up (#28 §4)', () => {
  beforeAll(async () => {
    outer = mkdtempSync(join(tmpdir(), 'state-locked-'));
    chmodSync(outer, 0o700);
    if (redisServerPath()) redis = await startRedis();
  });
  afterEach(() => {
    for (const p of procs.splice(0)) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  });
  afterAll(async () => {
    await redis?.stop();
    rmSync(outer, { recursive: true, force: true });
  });


  it('rollout worker exits 2 with the message, before it joins the queue', async (ctx) => {
    if (!redis) ctx.skip(); // needs redis-server: apt-get install redis-server
    const r = await rollout(['worker', '--redis', redis!.url, '--state-dir', join(outer, 'state'), '--sandbox', 'none'], {}, /ready/);
    expect(r.ready).toBe(false);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(new RegExp(`rollout worker: sandboxed processes run as an unprivileged uid and cannot pass ${outer} on the way to the state dir`));
  });

  it('rollout worker with a reachable state dir still starts', async (ctx) => {
    if (!redis) ctx.skip(); // needs redis-server: apt-get install redis-server
    const ok = mkdtempSync(join(tmpdir(), 'state-open-'));
    chmodSync(ok, 0o711);
    try {
      const r = await rollout(['worker', '--redis', redis!.url, '--state-dir', join(ok, 'state'), '--sandbox', 'none'], {}, /worker \S+ ready/);
      expect(r.ready).toBe(true);
      expect(r.code).toBe(0);
    } finally {
      rmSync(ok, { recursive: true, force: true });
    }
  });

  it('rollout serve exits 2 with the message', async () => {
    const r = await rollout(['serve', '--port', '0', '--state-dir', join(outer, 'state2'), '--sandbox', 'none'], {}, /listening on/);
    expect(r.ready).toBe(false);
    expect(r.code).toBe(2);
    expect(r.err).toContain(`rollout serve: sandboxed processes run as an unprivileged uid and cannot pass ${outer} on the way to the state dir`);
  });

  it('rollout run exits 2 with the message when its default state dir (under TMPDIR) is unreachable', async () => {
    const r = await rollout(['run', join(outer, 'none.jsonl'), '--backend', 'oracle', '--sandbox', 'none'], { TMPDIR: outer });
    expect(r.code).toBe(2);
    expect(r.err).toContain(`rollout run: sandboxed processes run as an unprivileged uid and cannot pass ${outer} on the way to the state dir`);
  });
});
