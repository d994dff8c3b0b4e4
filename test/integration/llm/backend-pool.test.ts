import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { BackendError, CancelledError, TaskError, ValidationError } from '../../../src/errors.js';
import { BackendPool } from '../../../src/llm/backend-pool.js';
import type { GenerateRequest } from '../../../src/llm/llm-client.js';
import type { Engine, EngineRequest, EngineResult } from '../../../src/llm/llm-http-server.js';
import { startFakeLlmServer, type FakeLlmServer } from '../../../src/testing/fake-llm-server.js';

/** An engine that holds every request until the test releases it. */
function gate() {
  const held: { req: EngineRequest; release: () => void }[] = [];
  const seen: EngineRequest[] = [];
  const engine: Engine = {
    generate(req) {
      seen.push(req);
      return new Promise<EngineResult>((resolve) => {
        held.push({ req, release: () => resolve({ outputIds: [11, 151645], logprobs: [-0.5, -0.1], finishReason: 'stop' }) });
      });
    },
  };
  return { engine, held, seen, releaseAll: () => held.splice(0).forEach((h) => h.release()) };
}

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function server(opts: Parameters<typeof startFakeLlmServer>[0]): Promise<FakeLlmServer> {
  const s = await startFakeLlmServer(opts);
  cleanups.push(() => s.close());
  return s;
}

function pool(opts: ConstructorParameters<typeof BackendPool>[0] = {}): BackendPool {
  const p = new BackendPool({ probeIntervalMs: 0, ...opts });
  cleanups.push(() => p.close());
  return p;
}

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

async function deadPort(): Promise<number> {
  const s = http.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

const inFlight = (p: BackendPool) => Object.fromEntries(p.listBackends().map((b) => [b.id, b.inFlight]));

describe('BackendPool', () => {
  it('sends each call to the backend with the fewest requests in flight, then registration order', async () => {
    const g = gate();
    const p = pool();
    for (const id of ['a', 'b', 'c']) p.addBackend({ id, url: (await server({ policy: g.engine })).url, protocol: 'prorl' });
    const calls = Array.from({ length: 4 }, () => p.generate(request()));
    await vi.waitFor(() => expect(g.held).toHaveLength(4));
    expect(inFlight(p)).toEqual({ a: 2, b: 1, c: 1 });
    g.releaseAll();
    expect((await Promise.all(calls)).map((r) => r.backendId).sort()).toEqual(['a', 'a', 'b', 'c']);
  });

  it('keeps a rollout on its previous backend while its load is within the slack', async () => {
    const g = gate();
    const p = pool({ stickySlack: 2 });
    for (const id of ['a', 'b']) p.addBackend({ id, url: (await server({ policy: g.engine })).url, protocol: 'prorl' });
    const held = [p.generate(request({ preferredBackendId: 'a' })), p.generate(request({ preferredBackendId: 'a' }))];
    await vi.waitFor(() => expect(g.held).toHaveLength(2));
    expect(inFlight(p)).toEqual({ a: 2, b: 0 });
    const third = p.generate(request({ preferredBackendId: 'a' }));
    await vi.waitFor(() => expect(g.held).toHaveLength(3));
    expect(inFlight(p)).toEqual({ a: 3, b: 0 });
    const fourth = p.generate(request({ preferredBackendId: 'a' }));
    await vi.waitFor(() => expect(g.held).toHaveLength(4));
    expect(inFlight(p)).toEqual({ a: 3, b: 1 });
    g.releaseAll();
    await Promise.all([...held, third, fourth]);
  });

  it('moves a rollout off its previous backend at once with a slack of zero', async () => {
    const g = gate();
    const p = pool({ stickySlack: 0 });
    for (const id of ['a', 'b']) p.addBackend({ id, url: (await server({ policy: g.engine })).url, protocol: 'prorl' });
    const first = p.generate(request());
    await vi.waitFor(() => expect(g.held).toHaveLength(1));
    const second = p.generate(request({ preferredBackendId: 'a' }));
    await vi.waitFor(() => expect(g.held).toHaveLength(2));
    expect(inFlight(p)).toEqual({ a: 1, b: 1 });
    g.releaseAll();
    await Promise.all([first, second]);
  });

  it('admits a new backend at the current minimum load instead of flooding it', async () => {
    const g = gate();
    const p = pool();
    for (const id of ['a', 'b']) p.addBackend({ id, url: (await server({ policy: g.engine })).url, protocol: 'prorl' });
    const calls = Array.from({ length: 4 }, () => p.generate(request()));
    await vi.waitFor(() => expect(g.held).toHaveLength(4));
    p.addBackend({ id: 'c', url: (await server({ policy: g.engine })).url, protocol: 'prorl' });
    calls.push(p.generate(request()), p.generate(request()), p.generate(request()));
    await vi.waitFor(() => expect(g.held).toHaveLength(7));
    expect(inFlight(p)).toEqual({ a: 3, b: 3, c: 1 });
    g.releaseAll();
    await Promise.all(calls);
  });

  it('retries a refused connection on another backend with the same prompt ids', async () => {
    const g = gate();
    const p = pool();
    p.addBackend({ id: 'dead', url: `http://127.0.0.1:${await deadPort()}`, protocol: 'prorl' });
    p.addBackend({ id: 'live', url: (await server({ policy: g.engine })).url, protocol: 'prorl' });
    const req = request();
    const call = p.generate(req);
    await vi.waitFor(() => expect(g.held).toHaveLength(1));
    g.releaseAll();
    expect((await call).backendId).toBe('live');
    expect(g.seen[0]!.promptIds).toEqual(req.promptIds);
    expect(p.listBackends().find((b) => b.id === 'dead')!.failures).toBe(1);
  });

  it('retries a 5xx answer on another backend', async () => {
    const p = pool();
    p.addBackend({ id: 'bad', url: (await server({ errorRate: 1 })).url, protocol: 'prorl' });
    p.addBackend({ id: 'good', url: (await server({})).url, protocol: 'prorl' });
    expect((await p.generate(request())).backendId).toBe('good');
  });

  it('retries a call that hangs past the call timeout on another backend', async () => {
    const p = pool({ callTimeoutMs: 100 });
    p.addBackend({ id: 'hung', url: (await server({ hangRate: 1 })).url, protocol: 'prorl' });
    p.addBackend({ id: 'good', url: (await server({})).url, protocol: 'prorl' });
    expect((await p.generate(request())).backendId).toBe('good');
  });

  it('retries an answer that does not fit the protocol on another backend', async () => {
    const s = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"response_ids": [1, 2]}'));
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise<void>((r) => { s.closeAllConnections(); s.close(() => r()); }));
    const p = pool();
    p.addBackend({ id: 'bad', url: `http://127.0.0.1:${(s.address() as AddressInfo).port}`, protocol: 'prorl' });
    p.addBackend({ id: 'good', url: (await server({})).url, protocol: 'prorl' });
    expect((await p.generate(request())).backendId).toBe('good');
    expect(p.listBackends().find((b) => b.id === 'bad')!.failures).toBe(1);
  });

  it('does not retry a 4xx and reports a too-long prompt as a CONTEXT_FULL TaskError', async () => {
    const other = await server({});
    const p = pool();
    p.addBackend({ id: 'small', url: (await server({ maxModelLen: 10 })).url, protocol: 'vllm' });
    p.addBackend({ id: 'other', url: other.url, protocol: 'vllm' });
    const err = await p.generate(request({ maxTokens: 50 })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TaskError);
    expect((err as TaskError).code).toBe('CONTEXT_FULL');
    expect(other.requests).toBe(0);
  });

  it('throws a BackendError naming every attempt when all backends fail', async () => {
    const p = pool({ retries: 1 });
    p.addBackend({ id: 'x', url: (await server({ errorRate: 1 })).url, protocol: 'prorl' });
    p.addBackend({ id: 'y', url: (await server({ errorRate: 1 })).url, protocol: 'prorl' });
    const err = (await p.generate(request()).catch((e: unknown) => e)) as BackendError;
    expect(err).toBeInstanceOf(BackendError);
    expect((err.details!.attempts as { backendId: string }[]).map((a) => a.backendId)).toEqual(['x', 'y']);
  });

  it('refuses a backend that is not http(s), or whose id is already taken, with a ValidationError', () => {
    const p = pool();
    expect(() => p.addBackend({ url: 'ftp://h:1', protocol: 'prorl' })).toThrow(ValidationError);
    expect(() => p.addBackend({ url: 'http://h:1', protocol: 'tgi' as never })).toThrow(/unknown backend protocol/);
    p.addBackend({ id: 'a', url: 'http://127.0.0.1:1', protocol: 'prorl' });
    expect(() => p.addBackend({ id: 'a', url: 'http://127.0.0.1:2', protocol: 'prorl' })).toThrow(ValidationError);
  });

  it('throws a NO_BACKEND BackendError when the pool is empty', async () => {
    const err = (await pool().generate(request()).catch((e: unknown) => e)) as BackendError;
    expect(err).toBeInstanceOf(BackendError);
    expect(err.code).toBe('NO_BACKEND');
  });

  it('aborts the HTTP request when the rollout is cancelled', async () => {
    const g = gate();
    const p = pool();
    p.addBackend({ id: 'a', url: (await server({ policy: g.engine })).url, protocol: 'prorl' });
    const ac = new AbortController();
    const call = p.generate(request({ signal: ac.signal }));
    await vi.waitFor(() => expect(g.held).toHaveLength(1));
    ac.abort();
    await expect(call).rejects.toBeInstanceOf(CancelledError);
    await vi.waitFor(() => expect(g.held[0]!.req.signal.aborted).toBe(true));
    expect(inFlight(p)).toEqual({ a: 0 });
  });

  it('retries the in-flight calls of a removed backend on another one', async () => {
    const ga = gate();
    const p = pool();
    p.addBackend({ id: 'a', url: (await server({ policy: ga.engine })).url, protocol: 'prorl' });
    const call = p.generate(request());
    await vi.waitFor(() => expect(ga.held).toHaveLength(1));
    p.addBackend({ id: 'b', url: (await server({})).url, protocol: 'prorl' });
    expect(p.removeBackend('a')).toBe(true);
    expect((await call).backendId).toBe('b');
    expect(p.listBackends().map((b) => b.id)).toEqual(['b']);
  });

  it('lets a draining backend finish its calls, sends it nothing new, then removes it', async () => {
    const g = gate();
    const p = pool();
    p.addBackend({ id: 'a', url: (await server({ policy: g.engine })).url, protocol: 'prorl' });
    p.addBackend({ id: 'b', url: (await server({})).url, protocol: 'prorl' });
    const first = p.generate(request());
    await vi.waitFor(() => expect(g.held).toHaveLength(1));
    p.drainBackend('a');
    expect(p.listBackends().find((x) => x.id === 'a')!.state).toBe('draining');
    expect((await p.generate(request({ preferredBackendId: 'a' }))).backendId).toBe('b');
    g.releaseAll();
    expect((await first).backendId).toBe('a');
    await vi.waitFor(() => expect(p.listBackends().map((x) => x.id)).toEqual(['b']));
  });

  it('evicts a backend whose health probes fail and re-admits it once they pass', async () => {
    let up = true;
    const s = http.createServer((req, res) => {
      res.writeHead(up ? 200 : 503).end('{}');
    });
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise<void>((r) => { s.closeAllConnections(); s.close(() => r()); }));
    const p = pool({ probeIntervalMs: 5, failureThreshold: 1 });
    p.addBackend({ id: 'a', url: `http://127.0.0.1:${(s.address() as AddressInfo).port}`, protocol: 'prorl' });
    await vi.waitFor(() => expect(p.listBackends()[0]!.state).toBe('healthy'));
    up = false;
    await vi.waitFor(() => expect(p.listBackends()[0]!.state).toBe('degraded'));
    up = true;
    await vi.waitFor(() => expect(p.listBackends()[0]!.state).toBe('healthy'));
  });

  it('records the weight version the server reports with each turn', async () => {
    const p = pool();
    p.addBackend({ id: 'a', url: (await server({ weightVersion: 'step-12' })).url, protocol: 'sglang' });
    expect((await p.generate(request())).weightVersion).toBe('step-12');
  });

  it('stamps turns with the version set by setWeightVersion when the server reports none', async () => {
    const p = pool();
    p.addBackend({ id: 'a', url: (await server({})).url, protocol: 'vllm', weightVersion: 1 });
    expect((await p.generate(request())).weightVersion).toBe(1);
    p.setWeightVersion(2);
    expect((await p.generate(request())).weightVersion).toBe(2);
  });
});
