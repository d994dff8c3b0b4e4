import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { BackendError } from '../../../src/errors.js';
import { BackendPool } from '../../../src/llm/backend-pool.js';
import { HttpBackend } from '../../../src/llm/http-backend.js';
import type { GenerateRequest } from '../../../src/llm/llm-client.js';
import { startFakeLlmServer } from '../../../src/testing/fake-llm-server.js';

const ROOT = join(import.meta.dirname, '../../..');
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function request(over: Partial<GenerateRequest> = {}): GenerateRequest {
  return {
    rolloutId: 'r1',
    instance: { data_source: 'test', instance_id: 'i1' },
    turn: 0,
    promptIds: [151644, 872, 198, 14990, 151645, 198, 151644, 77091, 198],
    maxTokens: 8,
    sampling: {},
    signal: new AbortController().signal,
    ...over,
  };
}

/** A plain HTTP server answering with `handler`; closed after the test. */
async function rawServer(handler: http.RequestListener): Promise<string> {
  const s = http.createServer(handler);
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  cleanups.push(() => new Promise<void>((r) => {
    s.close(() => r());
    s.closeAllConnections();
  }));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

function readBody(req: http.IncomingMessage): Promise<Record<string, unknown>> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>));
  });
}

/** Spawns `rollout fake-llm` and waits for its `listening on` line; SIGCONT + SIGKILL in cleanup. */
async function spawnFake(args: string[]): Promise<{ proc: ChildProcess; url: string }> {
  const proc = spawn(process.execPath, [join(ROOT, 'bin/rollout.js'), 'fake-llm', '--port', '0', ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  cleanups.push(async () => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    // A stopped process would not act on SIGTERM until continued.
    proc.kill('SIGCONT');
    proc.kill('SIGKILL');
    await once(proc, 'exit');
  });
  let out = '';
  let err = '';
  proc.stderr!.on('data', (c: Buffer) => (err += c.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    proc.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve(m[1]!);
    });
    proc.once('exit', (code) => reject(new Error(`fake-llm exited with ${code}: ${err}`)));
  });
  return { proc, url };
}

describe('a frozen backend', () => {
  it('has its in-flight calls re-sent to the other backend once it is marked degraded, long before the call timeout', async () => {
    const [a, b] = await Promise.all([spawnFake(['--latency-ms', '1500']), spawnFake(['--latency-ms', '1500'])]);
    const pool = new BackendPool({ probeIntervalMs: 200, probeTimeoutMs: 300, failureThreshold: 2, callTimeoutMs: 600_000, stickySlack: 0 });
    cleanups.push(() => pool.close());
    pool.addBackend({ id: 'a', url: a.url, protocol: 'prorl' });
    pool.addBackend({ id: 'b', url: b.url, protocol: 'prorl' });
    await expect.poll(() => pool.listBackends().map((x) => x.state)).toEqual(['healthy', 'healthy']);
    const calls = Array.from({ length: 8 }, (_, i) => pool.generate(request({ rolloutId: `r${i}`, turn: i })));
    await expect.poll(() => pool.listBackends().map((x) => x.inFlight)).toEqual([4, 4]);
    a.proc.kill('SIGSTOP');
    // With a 600 s call timeout, only the abort on `degraded` can bring these back (the test's
    // own timeout is 60 s).
    const results = await Promise.all(calls);
    expect(results.every((r) => r.outputIds.length > 0)).toBe(true);
    expect(results.filter((r) => r.backendId === 'b')).toHaveLength(8);
    expect(pool.listBackends().find((x) => x.id === 'a')!.state).toBe('degraded');
    a.proc.kill('SIGCONT');
    await expect.poll(() => pool.listBackends().find((x) => x.id === 'a')!.state, { timeout: 20_000 }).toBe('healthy');
    // Two CLI start-ups (tsx) take seconds each on a loaded machine; the calls themselves must
    // come back in seconds, not the 600 s call timeout.
  }, 120_000);

  it('keeps its calls waiting when no other backend is healthy', async () => {
    let answer: (() => void) | undefined;
    let probesOk = true;
    const url = await rawServer((req, res) => {
      if (req.method === 'GET') {
        res.writeHead(probesOk ? 200 : 503).end('{}');
        return;
      }
      answer = () => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ response_ids: [5, 151645], logprobs: [-0.1, -0.2] }));
    });
    const pool = new BackendPool({ probeIntervalMs: 50, probeTimeoutMs: 500, failureThreshold: 1 });
    cleanups.push(() => pool.close());
    pool.addBackend({ id: 'only', url, protocol: 'prorl' });
    await expect.poll(() => pool.listBackends()[0]!.state).toBe('healthy');
    const call = pool.generate(request());
    await expect.poll(() => answer).toBeDefined();
    probesOk = false;
    await expect.poll(() => pool.listBackends()[0]!.state).toBe('degraded');
    answer!();
    await expect(call).resolves.toMatchObject({ backendId: 'only', outputIds: [5, 151645] });
  });
});

describe('call timeouts', () => {
  it('fails a call whose answer stalls mid-body after stallTimeoutMs and retries it elsewhere', async () => {
    const stalled = await rawServer((req, res) => {
      if (req.method === 'GET') return void res.writeHead(200).end('{}');
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"response_ids": [5,');
      // ...and nothing more.
    });
    const good = await startFakeLlmServer({});
    cleanups.push(() => good.close());
    const pool = new BackendPool({ probeIntervalMs: 0, stallTimeoutMs: 200, callTimeoutMs: 600_000 });
    cleanups.push(() => pool.close());
    pool.addBackend({ id: 'stalled', url: stalled, protocol: 'prorl' });
    pool.addBackend({ id: 'good', url: good.url, protocol: 'prorl' });
    const r = await pool.generate(request({ preferredBackendId: 'stalled' }));
    expect(r.backendId).toBe('good');
  });

  it('fails a call with no first byte within firstByteTimeoutMs', async () => {
    const silent = await rawServer(() => {});
    const b = new HttpBackend({ id: 'silent', url: silent, protocol: 'prorl' });
    cleanups.push(() => b.close());
    const err = await b.generate(request(), { callMs: 600_000, firstByteMs: 100 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackendError);
    expect((err as BackendError).details).toMatchObject({ kind: 'timeout', timeout: 'first-byte' });
  });
});

describe('an SGLang server that does not know sampling_seed', () => {
  it('gets the call once more without it, and never again', async () => {
    const bodies: Record<string, unknown>[] = [];
    const url = await rawServer(async (req, res) => {
      const body = await readBody(req);
      bodies.push(body);
      if ('sampling_seed' in (body.sampling_params as object)) {
        res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: "SamplingParams.__init__() got an unexpected keyword argument 'sampling_seed'" } }));
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ output_ids: [5], meta_info: { output_token_logprobs: [[-0.5, 5, null]], finish_reason: { type: 'length' } } }));
    });
    const b = new HttpBackend({ id: 'sg', url, protocol: 'sglang' });
    cleanups.push(() => b.close());
    const r = await b.generate(request({ sampling: { seed: 7 } }), 5_000);
    expect(r.outputIds).toEqual([5]);
    await b.generate(request({ sampling: { seed: 8 } }), 5_000);
    expect(bodies.map((x) => 'sampling_seed' in (x.sampling_params as object))).toEqual([true, false, false]);
  });
});

describe('logprob semantics', () => {
  it('records per turn what the backend gives and warns once when a pool mixes raw and processed', async () => {
    const s = await startFakeLlmServer({});
    cleanups.push(() => s.close());
    const warnings: string[] = [];
    const pool = new BackendPool({ probeIntervalMs: 0 }, { warn: (m) => warnings.push(m) });
    cleanups.push(() => pool.close());
    pool.addBackend({ id: 'v', url: s.url, protocol: 'vllm' });
    expect(warnings).toEqual([]);
    pool.addBackend({ id: 'sg', url: s.url, protocol: 'sglang' });
    pool.addBackend({ id: 'sg2', url: s.url, protocol: 'sglang' });
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/v gives raw logprobs, sg gives processed/);
    const v = await pool.generate(request({ preferredBackendId: 'v' }));
    expect(v.logprobSemantics).toBe('raw');
    const sg = await pool.generate(request({ preferredBackendId: 'sg' }));
    expect(sg.logprobSemantics).toBe('processed');
    expect(pool.listBackends().map((b) => b.logprobSemantics)).toEqual(['raw', 'processed', 'processed']);
  });
});

describe('backend ids', () => {
  it('gives two paths on one host:port two backends in the pool', () => {
    const pool = new BackendPool({ probeIntervalMs: 0 });
    cleanups.push(() => pool.close());
    pool.addBackend({ url: 'http://127.0.0.1:9/a/v1', protocol: 'openai' });
    pool.addBackend({ url: 'http://127.0.0.1:9/b/v1', protocol: 'openai' });
    expect(pool.listBackends().map((b) => b.id)).toEqual(['127.0.0.1:9/a/v1', '127.0.0.1:9/b/v1']);
  });
});
