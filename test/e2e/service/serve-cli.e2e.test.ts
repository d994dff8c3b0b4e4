import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startFakeLlmServer, type FakeLlmServer } from '../../../src/testing/fake-llm-server.js';
import { api, descendants, ROOT, serve, shellInstances, SHELL_TASKS, until } from './harness.js';

const SANDBOX = process.env['ROLLOUT_E2E_SANDBOX'] ?? 'auto';

let llm: FakeLlmServer;
let dir: string;
beforeAll(async () => {
  llm = await startFakeLlmServer({ tasks: SHELL_TASKS, latencyMs: 60_000 });
  dir = mkdtempSync(join(tmpdir(), 'rollout-e2e-cli-'));
});
afterAll(async () => {
  await llm.close();
  rmSync(dir, { recursive: true, force: true });
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function runCli(args: string[]): Promise<{ code: number | null; err: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(ROOT, 'bin/rollout.js'), 'serve', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    child.on('exit', (code) => resolve({ code, err }));
  });
}

describe('rollout serve (command)', { timeout: 120_000 }, () => {
  it('exits 0 on SIGTERM mid-run, leaving no sandbox or host process behind', async () => {
    const s = await serve(['--backend', llm.url, '--sandbox', SANDBOX]);
    let before: number[] = [];
    try {
      const inst = shellInstances()[0]!;
      const pending = api(s.url, 'POST', '/v1/batches', { instances: [inst], n: 4, sampling_params: { max_iterations: 4 } });
      await until(async () => (await api(s.url, 'GET', '/status')).body.run === 4);
      await pending;
      before = descendants(s.child.pid!).map((p) => p.pid);
      expect(before.length).toBeGreaterThan(0);
    } finally {
      expect(await s.stop()).toBe(0);
    }
    await until(() => before.every((pid) => !alive(pid)), 10_000);
  });

  it('takes options from --config, with flags winning', async () => {
    const cfg = join(dir, 'serve.json');
    writeFileSync(cfg, JSON.stringify({ service: { bodyLimitBytes: 1_000_000 }, runtime: { stages: { init: 3, run: 5 } }, backends: ['oracle'] }));
    const s = await serve(['--config', cfg, '--sandbox', SANDBOX, '--body-limit', '2048']);
    try {
      expect((await api(s.url, 'GET', '/status')).body).toMatchObject({ stages: { init: { limit: 3 }, run: { limit: 5 } }, llm_servers: 1 });
      expect((await api(s.url, 'POST', '/process', { instance: { data_source: 'shell', pad: 'x'.repeat(4096) } })).status).toBe(413);
    } finally {
      expect(await s.stop()).toBe(0);
    }
  });

  it('maps the reference server flags onto stage limits and the time budget, noting the ones without meaning', async () => {
    const s = await serve(['--sandbox', 'none', '--backend', 'oracle', '--timeout', '60', '--max-init-workers', '3', '--max-run-workers', '5', '--max-eval-workers', '2', '--allow-skip-eval', '--reward-server-ip', '10.0.0.1']);
    try {
      expect((await api(s.url, 'GET', '/status')).body).toMatchObject({ stages: { init: { limit: 3 }, run: { limit: 5 }, eval: { limit: 2 } } });
      expect(s.stderr()).toMatch(/--allow-skip-eval has no effect/);
      expect(s.stderr()).toMatch(/--reward-server-ip has no effect/);
    } finally {
      expect(await s.stop()).toBe(0);
    }
  });

  it("starts with the reference's launch flags as its scripts pass them, argparse forms included (#28)", async () => {
    // run_math.py's default --reward-server-ip (no value), a bool flag given 'False', a switch,
    // the backends as --llm-server-address, and argparse's --flag=value.
    const s = await serve(['--sandbox', 'none', '--max-init-workers=3', '--max-run-workers', '5', '--timeout', '60', '--allow-skip-eval', 'False', '--reward-server-ip', '--use-thread-based-server', '--llm-server-address', 'oracle']);
    try {
      expect((await api(s.url, 'GET', '/status')).body).toMatchObject({ stages: { init: { limit: 3 }, run: { limit: 5 } }, llm_servers: 1 });
      for (const flag of ['--allow-skip-eval', '--reward-server-ip', '--use-thread-based-server']) expect(s.stderr()).toMatch(new RegExp(`note: ${flag} has no effect`));
    } finally {
      expect(await s.stop()).toBe(0);
    }
  });

  it('refuses to bind a non-loopback address without a token: prints why and exits 2 (#9.6)', async () => {
    const r = await runCli(['--host', '0.0.0.0', '--port', '0', '--sandbox', 'none']);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/refusing to bind 0\.0\.0\.0 without --token/);
  });

  it('binds a non-loopback address with --insecure and warns', async () => {
    const s = await serve(['--host', '0.0.0.0', '--insecure', '--sandbox', 'none']);
    try {
      await until(() => /WARNING: serving 0\.0\.0\.0 without a token/.test(s.stderr()));
    } finally {
      expect(await s.stop()).toBe(0);
    }
  });

  it('closes and exits 0 on a SIGTERM that comes while the start-up backend probe still waits', async () => {
    // A backend that accepts and never answers holds the probe for its 3 s timeout, after
    // `listening on`: the signal must find the service's handler, not the default action.
    const silent = createServer(() => undefined);
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    try {
      const { port } = silent.address() as AddressInfo;
      const s = await serve(['--sandbox', 'none', '--backend', `http://127.0.0.1:${port}`]);
      expect(await s.stop()).toBe(0);
      expect(s.stderr()).toMatch(/SIGTERM, closing/);
    } finally {
      silent.closeAllConnections();
      await new Promise((r) => silent.close(r));
    }
  });

  it('exits 2 naming the problem on an unknown flag', async () => {
    const r = await runCli(['--bogus']);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/bogus/);
  });

  it('exits 2 on a bad backend address', async () => {
    const r = await runCli(['--port', '0', '--backend', 'ftp://nowhere', '--sandbox', 'auto']);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/invalid backend address/);
  });
});
