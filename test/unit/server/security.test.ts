import { afterEach, describe, expect, it } from 'vitest';
import http from 'node:http';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WebSocket } from 'ws';
import { createService, type RolloutService } from '../../../src/server/service.js';
import { serviceRuntimeFactory } from '../../../src/server/runtime-factory.js';
import { confine, confineInstancePaths, confineSamplingPaths } from '../../../src/server/path-roots.js';
import { toProrlResult } from '../../../src/server/prorl-result.js';
import { MemorySandboxProvider } from '../../../src/testing/memory-sandbox.js';
import { TestCodec } from '../../../src/testing/test-codec.js';
import { startFakeLlmServer } from '../../../src/testing/fake-llm-server.js';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import { InstanceSchema } from '../../../src/protocol/instance.js';
import type { RolloutResult } from '../../../src/protocol/trajectory.js';
import { startHarness, post, get, task, Inbox, type Harness } from './harness.js';

let h: Harness | undefined;
let svc: RolloutService | undefined;
const dirs: string[] = [];
const sockets: WebSocket[] = [];
afterEach(async () => {
  for (const s of sockets.splice(0)) s.terminate();
  await h?.close();
  await svc?.close();
  h = undefined;
  svc = undefined;
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A raw request, so the test controls every header (fetch adds its own Origin rules). */
function raw(url: string, method: string, path: string, headers: Record<string, string>, body?: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = http.request({ host: u.hostname, port: u.port, method, path, headers: { ...headers, ...(body !== undefined ? { 'content-length': String(Buffer.byteLength(body)) } : {}) } }, (res) => {
      let text = '';
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('cross-site requests (#9.5, #10.1)', () => {
  it('refuses a request from another origin and starts no rollout', async () => {
    h = await startHarness();
    const body = JSON.stringify({ instance: task() });
    const r = await raw(h.url, 'POST', '/process', { origin: 'https://evil.example', 'content-type': 'application/json' }, body);
    expect(r.status).toBe(403);
    expect(JSON.parse(r.body).error.code).toBe('FORBIDDEN_ORIGIN');
    expect((await raw(h.url, 'GET', '/status', { origin: 'null' })).status).toBe(403);
    expect(h.rt().list()).toEqual([]);
  });

  it('serves a request from its own origin (the visualizer page)', async () => {
    h = await startHarness();
    const r = await raw(h.url, 'POST', '/v1/rollouts', { origin: h.url, 'content-type': 'application/json' }, JSON.stringify({ instance: task() }));
    expect(r.status).toBe(202);
  });

  it('serves another origin that presents the token', async () => {
    h = await startHarness({ token: 's3cret' });
    const headers = { origin: 'https://dashboard.example', 'content-type': 'application/json' };
    expect((await raw(h.url, 'GET', '/status', headers)).status).toBe(403);
    expect((await raw(h.url, 'GET', '/status', { ...headers, authorization: 'Bearer s3cret' })).status).toBe(200);
  });

  it('refuses a non-empty body without a content type (a no-cors page fetch) and starts no rollout', async () => {
    h = await startHarness();
    const r = await raw(h.url, 'POST', '/process', {}, JSON.stringify({ instance: task() }));
    expect(r.status).toBe(415);
    const chunked = await new Promise<number>((resolve, reject) => {
      const u = new URL(h!.url);
      const req = http.request({ host: u.hostname, port: u.port, method: 'POST', path: '/v1/rollouts', headers: { 'transfer-encoding': 'chunked' } }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.end(JSON.stringify({ instance: task() }));
    });
    expect(chunked).toBe(415);
    expect(h.rt().list()).toEqual([]);
  });

  it('accepts bodiless POSTs with any content type, as old aiohttp sends them', async () => {
    h = await startHarness();
    for (const path of ['/stop', '/start', '/clear_llm_server']) {
      const r = await raw(h.url, 'POST', path, { 'content-type': 'application/octet-stream', 'content-length': '0' });
      expect(r.status, path).toBe(200);
    }
    expect((await raw(h.url, 'POST', '/start', { 'content-type': 'application/octet-stream' }, 'x')).status).toBe(415);
  });

  it('refuses a WebSocket upgrade from another origin unless it presents the token', async () => {
    h = await startHarness({ token: 's3cret' });
    const open = (url: string, origin: string): Promise<string> =>
      new Promise((resolve) => {
        const ws = new WebSocket(url, { headers: { origin } });
        sockets.push(ws);
        ws.once('open', () => resolve('open'));
        ws.once('unexpected-response', (_req, res) => resolve(String(res.statusCode)));
        ws.once('error', () => resolve('error'));
      });
    const base = h.url.replace('http', 'ws') + '/v1/events';
    expect(await open(base, 'https://evil.example')).toBe('401');
    expect(await open(`${base}?token=s3cret`, 'https://evil.example')).toBe('open');
  });
});

describe('bad instance data (#9.9)', () => {
  it('refuses a newline in instance_id at submit, naming the field (400 on /v1, 422 on ProRL)', async () => {
    h = await startHarness();
    const v = await post(`${h.url}/v1/rollouts`, { instance: task({ instance_id: 'a\nb' }) });
    expect(v.status).toBe(400);
    expect(v.body.error.issues[0].path).toBe('instance.instance_id');
    const p = await post(`${h.url}/process`, { instance: task({ instance_id: 'x\r\nInjected: 1' }) });
    expect(p.status).toBe(422);
    expect(p.body.detail[0].loc).toEqual(['body', 'instance', 'instance_id']);
    expect(h.rt().list()).toEqual([]);
  });

  it('accepts a non-ASCII instance_id', async () => {
    h = await startHarness();
    const p = await post(`${h.url}/process`, { instance: task({ instance_id: 'tâche-ü-数' }) });
    expect(p).toMatchObject({ status: 200, body: { instance_id: 'tâche-ü-数' } });
  });

  it('runs an instance whose id holds non-ASCII, spaces and # against an HTTP backend (the id is encoded in its header)', async () => {
    const id = 'tâche #1 数/x';
    const task = { data_source: 'math', instance_id: id, problem: '1+1?', answer: '2', oracle: [{ tool_calls: [{ name: 'finish', arguments: { message: '\\boxed{2}' } }] }] };
    const llm = await startFakeLlmServer({ tasks: [InstanceSchema.parse(task)] });
    try {
      const codec = createQwen3Codec();
      const service = createService(
        { createRuntime: serviceRuntimeFactory({ codec, sandboxes: () => new MemorySandboxProvider() }), backends: [{ address: llm.url }] },
        { port: 0, backendsIntervalMs: 0 },
      );
      svc = service;
      const url = await service.listen();
      const r = await post(`${url}/process`, { instance: task, sampling_params: { max_iterations: 3 } });
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ outcome: 'completed', instance_id: id, resolved: true, finish: true });
    } finally {
      await llm.close();
    }
  }, 60_000);

  it('never shows a host path in an error message', () => {
    const state = join(tmpdir(), 'rollout-state-x', 'sandboxes', 'sb-1');
    const r = toProrlResult({
      id: 'r1',
      instanceId: 'i',
      trajectoryId: null,
      groupId: null,
      dataSource: 'math',
      outcome: 'infra-error',
      finish: null,
      reward: null,
      resolved: false,
      evalDetails: null,
      error: { name: 'SandboxError', code: 'SANDBOX', message: `cannot remove ${state}: EBUSY (cwd ${process.cwd()})`, retryable: true },
      attempts: 3,
      trajectory: { turns: [], tokens: [], lossMask: [], logprobs: [], messages: [], tools: [], diagnostics: { drift: [] } },
      timing: { queueMs: 0, initMs: 0, runMs: 0, evalMs: 0, countedMs: 0, wallMs: 0, timeoutTriggered: false },
    } satisfies RolloutResult);
    expect(r.error).not.toContain(tmpdir());
    expect(r.error).not.toContain(process.cwd());
    expect(r.error).toContain('<host>');
  });
});

/** A service over a real embedded runtime (memory sandboxes, test codec, no backend). */
async function realService(options: Record<string, unknown> = {}): Promise<{ service: RolloutService; url: string }> {
  const codec = new TestCodec();
  const service = createService(
    { createRuntime: serviceRuntimeFactory({ codec, sandboxes: () => new MemorySandboxProvider(), runtime: { maxQueued: 50_000 }, retainEvents: 100 }) },
    { port: 0, backendsIntervalMs: 0, ...options },
  );
  const url = await service.listen();
  return { service, url };
}

describe('batches the queue cannot hold (#9.10)', () => {
  it('answers 49 × 1024 with 429 before any work: no rollout, no outcome, no event, /healthz answering', async () => {
    const s = await realService();
    svc = s.service;
    const instances = Array.from({ length: 49 }, (_, i) => ({ data_source: 'math', instance_id: `m${i}`, problem: '1+1?', answer: '2' }));
    const [batch, health] = await Promise.all([post(`${s.url}/v1/batches`, { instances, n: 1024 }), get(`${s.url}/healthz`)]);
    expect(batch.status).toBe(429);
    expect(batch.body.error.code).toBe('QUEUE_FULL');
    expect(batch.headers.get('retry-after')).toBe('1');
    expect(health.status).toBe(200);
    const st = (await get(`${s.url}/status`)).body;
    expect(st).toMatchObject({ pending_jobs: 0, queued: 0, completed: 0, outcomes: {}, jobs: [] });
    expect(s.service.lastSeq).toBe(-1);
    expect((await get(`${s.url}/v1/rollouts`)).body.total).toBe(0);
  });

  it('refuses a batch over maxBatchRollouts (n × instances) with 413 naming n', async () => {
    const s = await realService({ maxBatchRollouts: 100 });
    svc = s.service;
    const r = await post(`${s.url}/v1/batches`, { instances: [{ data_source: 'math', problem: 'p', answer: '1' }, { data_source: 'math', problem: 'p', answer: '1' }], n: 64 });
    expect(r.status).toBe(413);
    expect(r.body.error).toMatchObject({ code: 'BATCH_TOO_LARGE', issues: [{ path: 'n' }] });
    expect((await get(`${s.url}/v1/rollouts`)).body.total).toBe(0);
  });
});

describe('host paths named by API clients (#9.12)', () => {
  it('refuses repo_dir from the API when no path roots are configured', async () => {
    h = await startHarness();
    const v = await post(`${h.url}/v1/rollouts`, { instance: task({ repo_dir: '/etc' }) });
    expect(v.status).toBe(400);
    expect(v.body.error).toMatchObject({ code: 'PATH_NOT_ALLOWED', issues: [{ path: 'instance.repo_dir' }] });
    const p = await post(`${h.url}/process`, { instance: task({ repo_dir: '../../etc' }) });
    expect(p.status).toBe(400);
    expect(p.body.detail).toMatch(/instance\.repo_dir/);
    const b = await post(`${h.url}/v1/batches`, { instances: [task({ workspace_dir: '/root' })] });
    expect(b.body.error.issues[0].path).toBe('instances.0.workspace_dir');
    expect(h.rt().list()).toEqual([]);
  });

  it('accepts a path inside a root (as its real path) and refuses escapes by .. or by a symlink', () => {
    const root = mkdtempSync(join(tmpdir(), 'rollout-roots-'));
    const outside = mkdtempSync(join(tmpdir(), 'rollout-outside-'));
    dirs.push(root, outside);
    mkdirSync(join(root, 'repo'));
    symlinkSync(outside, join(root, 'link'));
    expect(confine(join(root, 'repo'), [root], 'instance.repo_dir')).toBe(realpathSync(join(root, 'repo')));
    expect(confine('repo', [root], 'instance.repo_dir')).toBe(realpathSync(join(root, 'repo')));
    expect(() => confine(join(root, 'repo', '..', '..'), [root], 'instance.repo_dir')).toThrow(/outside the allowed path roots/);
    expect(() => confine(join(root, 'link'), [root], 'instance.repo_dir')).toThrow(/outside the allowed path roots/);
    expect(() => confine(join(root, 'nope'), [root], 'instance.repo_dir')).toThrow(/does not exist/);
    expect(() => confine(join(root, 'repo'), [], 'instance.repo_dir')).toThrow(/no host paths/);
  });

  it('confines an image that names a local layout but lets a registry reference through', () => {
    const ok: Record<string, unknown> = { image: 'python:3.11-slim' };
    confineInstancePaths(ok, [], 'instance');
    expect(ok['image']).toBe('python:3.11-slim');
    expect(() => confineInstancePaths({ image: 'oci:/var/lib/secret-layout:latest' }, [], 'instance')).toThrow(/instance\.image/);
    expect(() => confineInstancePaths({ image: './layout' }, [], 'instance')).toThrow(/instance\.image/);
    const root = mkdtempSync(join(tmpdir(), 'rollout-img-'));
    dirs.push(root);
    mkdirSync(join(root, 'layout'));
    const inside: Record<string, unknown> = { image: `oci:${join(root, 'layout')}:v1` };
    confineInstancePaths(inside, [root], 'instance');
    expect(inside['image']).toBe(`oci:${realpathSync(join(root, 'layout'))}:v1`);
  });

  it('confines a tokenizer directory but lets a hub name through', () => {
    const sp: Record<string, unknown> = { custom_tokenizer: 'Qwen/Qwen3-8B' };
    confineSamplingPaths(sp, [], 'sampling_params');
    expect(sp['custom_tokenizer']).toBe('Qwen/Qwen3-8B');
    expect(() => confineSamplingPaths({ custom_tokenizer: '/etc/secret-tokenizer' }, [], 'sampling_params')).toThrow(/sampling_params\.custom_tokenizer/);
    expect(() => confineSamplingPaths({ custom_tokenizer: '../tok' }, [], 'sampling_params')).toThrow(/no host paths/);
    // Only `org/name` is a hub name: a bare or deeper relative name is a path under the working directory.
    expect(() => confineSamplingPaths({ custom_tokenizer: 'models' }, [], 'sampling_params')).toThrow(/no host paths/);
    expect(() => confineSamplingPaths({ custom_tokenizer: 'etc/ssl/private' }, [], 'sampling_params')).toThrow(/no host paths/);
  });
});

describe('a WebSocket flood (#9.13)', () => {
  it('closes a client flooding messages with 1008 while /healthz keeps answering', async () => {
    h = await startHarness();
    const ws = new WebSocket(h.url.replace('http', 'ws') + '/v1/events');
    sockets.push(ws);
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
    const ping = JSON.stringify({ type: 'ping' });
    let healthy = 0;
    const polls: Promise<void>[] = [];
    for (let burst = 0; burst < 20 && ws.readyState === WebSocket.OPEN; burst++) {
      for (let i = 0; i < 500; i++) ws.send(ping);
      polls.push(get(`${h.url}/healthz`).then((r) => void (r.status === 200 && healthy++)));
      await new Promise((r) => setImmediate(r));
    }
    expect(await closed).toBe(1008);
    await Promise.all(polls);
    expect(healthy).toBe(polls.length);
    expect((await get(`${h.url}/healthz`)).status).toBe(200);
  });

  it('answers a client within the rate', async () => {
    h = await startHarness();
    const ws = new WebSocket(h.url.replace('http', 'ws') + '/v1/events');
    sockets.push(ws);
    const inbox = new Inbox<{ type: string }>();
    ws.on('message', (d) => inbox.push(JSON.parse(d.toString())));
    await new Promise<void>((resolve) => ws.once('open', () => resolve()));
    for (let i = 0; i < 50; i++) ws.send(JSON.stringify({ type: 'ping', nonce: i }));
    await inbox.until((ms) => ms.filter((m) => m.type === 'pong').length === 50);
    expect(ws.readyState).toBe(WebSocket.OPEN);
  });
});
