import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import http from 'node:http';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ManualClock, type Clock } from '../../../../src/clock.js';
import { serviceRuntimeFactory } from '../../../../src/server/runtime-factory.js';
import { createService, type RolloutService } from '../../../../src/server/service.js';
import type { ServiceRuntime } from '../../../../src/server/service-runtime.js';
import type { ServiceOptionsInput } from '../../../../src/server/service-options.js';
import { ImageStore } from '../../../../src/sandbox/images/image-store.js';
import { tarOf, writeOciLayout } from '../../../helpers/images/oci-fixture.js';
import { createTestHandler, MemorySandboxProvider, TestCodec } from '../../../../src/testing/index.js';

// The Polar routes over the real service runtime (supervisor, oracle backend replaying
// agent.settings.oracle) with in-memory sandboxes and a stand-in `harness` handler (the test
// handler under that name): everything on one manual clock, so deadlines, callback spacing and
// heartbeats move only when a test advances them.
const bash = (command: string) => ({ content: `run ${command}`, tool_calls: [{ name: 'execute_bash', arguments: { command } }] });
const finish = { content: 'done', tool_calls: [{ name: 'finish', arguments: { message: 'done' } }] };

let clock: ManualClock;
let service: RolloutService;
let url: string;
let stateDir: string;
let providers: MemorySandboxProvider[];
let warnings: string[];
/** Timers of 5 s armed through the service's clock: the callback's spacing sleeps. */
let armed5s: number;

async function start(opts: { token?: string; maxQueued?: number; stages?: { init: number; run: number }; createMs?: number; imageStore?: string; service?: ServiceOptionsInput } = {}): Promise<void> {
  clock = new ManualClock();
  armed5s = 0;
  const m = clock;
  const spy: Clock = {
    now: () => m.now(),
    setTimeout: (fn, ms) => {
      if (ms === 5_000) armed5s++;
      return m.setTimeout(fn, ms);
    },
    clearTimeout: (h) => m.clearTimeout(h),
  };
  providers = [];
  warnings = [];
  stateDir = mkdtempSync(join(tmpdir(), 'polar-unit-'));
  const factory = serviceRuntimeFactory({
    codec: new TestCodec(),
    clock,
    sandboxes: () => {
      const p = new MemorySandboxProvider({ clock, latencyMs: (op) => (op === 'create' ? (opts.createMs ?? 0) : 0) });
      providers.push(p);
      return p;
    },
    handlers: [createTestHandler({ name: 'harness', aliases: [] })],
    runtime: { sandboxDriver: 'none', retries: { max: 0, backoffMs: 0, backoffMaxMs: 0 }, maxQueued: opts.maxQueued ?? 1000, stages: opts.stages ?? { init: 8, run: 8 } },
    retainEvents: 1000,
      });
  service = createService(
    {
      // The in-memory provider reads no image store: a test that names one stands in for the host provider's.
      createRuntime: opts.imageStore ? async () => Object.assign(await factory(), { imageStore: opts.imageStore }) : factory,
      backends: [{ address: 'oracle' }],
      clock: spy,
      stateDir,
      warn: (m) => warnings.push(m),
    },
    { port: 0, backendsIntervalMs: 0, ...(opts.token ? { token: opts.token } : {}), ...opts.service },
  );
  url = await service.listen();
}

afterEach(async () => {
  try {
    await service.close();
  } finally {
    // Removed whatever the checks below say: a failing test must not leave its state dir.
    rmSync(stateDir, { recursive: true, force: true });
  }
  expect(providers.every((p) => p.live === 0)).toBe(true);
});

async function api(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: any }> {
  const res = await fetch(url + path, { method, headers: { 'content-type': 'application/json', ...headers }, body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

const task = (id: string, extra: Record<string, unknown> = {}, oracle: unknown[] = [finish]): Record<string, unknown> => ({
  task_id: id,
  instruction: 'do it',
  agent: { harness: 'shell', custom_shell: { command: 'agent {{INSTRUCTION}}' }, settings: { oracle } },
  evaluator: { strategy: 'session_completed' },
  ...extra,
});

const rt = (): ServiceRuntime => service.runtime!;

async function poll(id: string, status = 'completed'): Promise<any> {
  let last: any;
  await expect.poll(async () => ((last = (await api('GET', `/rollout/task/${id}`)).body), last.status), { timeout: 10_000, interval: 5 }).toBe(status);
  return last;
}

describe('POST /rollout/task/submit: bad input', () => {
  beforeEach(() => start());
  const table: { name: string; body: (t: Record<string, unknown>) => unknown; loc: (string | number)[] }[] = [
    { name: 'a missing agent', body: (t) => ({ ...t, agent: undefined }), loc: ['body', 'agent'] },
    { name: 'num_samples below 1', body: (t) => ({ ...t, num_samples: 0 }), loc: ['body', 'num_samples'] },
    { name: 'a fractional num_samples', body: (t) => ({ ...t, num_samples: 1.5 }), loc: ['body', 'num_samples'] },
    { name: 'dispatch_priority above 100', body: (t) => ({ ...t, dispatch_priority: 101 }), loc: ['body', 'dispatch_priority'] },
    { name: 'early_stop_min_usable_sessions above num_samples', body: (t) => ({ ...t, num_samples: 2, early_stop_min_usable_sessions: 3 }), loc: ['body', 'early_stop_min_usable_sessions'] },
    { name: 'timeout_seconds of 0', body: (t) => ({ ...t, timeout_seconds: 0 }), loc: ['body', 'timeout_seconds'] },
    { name: 'an unknown harness', body: (t) => ({ ...t, agent: { harness: 'aider' } }), loc: ['body', 'agent', 'harness'] },
    { name: 'shell without custom_shell', body: (t) => ({ ...t, agent: { harness: 'shell' } }), loc: ['body', 'agent', 'custom_shell'] },
    { name: 'custom_shell on a preset', body: (t) => ({ ...t, agent: { harness: 'codex', custom_shell: { command: 'x' } } }), loc: ['body', 'agent', 'custom_shell'] },
    { name: 'a Python agent class', body: (t) => ({ ...t, agent: { import_path: 'my.Agent' } }), loc: ['body', 'agent', 'import_path'] },
    { name: 'an unknown builder', body: (t) => ({ ...t, builder: { strategy: 'magic' } }), loc: ['body', 'builder', 'strategy'] },
    { name: 'an unknown evaluator', body: (t) => ({ ...t, evaluator: { strategy: 'vibes' } }), loc: ['body', 'evaluator', 'strategy'] },
    { name: 'a negative agent_timeout', body: (t) => ({ ...t, metadata: { agent_timeout: -1 } }), loc: ['body', 'metadata', 'agent_timeout'] },
    { name: 'a boolean agent_timeout', body: (t) => ({ ...t, metadata: { agent_timeout: true } }), loc: ['body', 'metadata', 'agent_timeout'] },
    { name: 'a callback_url that is not http', body: (t) => ({ ...t, callback_url: 'file:///etc/passwd' }), loc: ['body', 'callback_url'] },
    { name: 'an upload step without a target', body: (t) => ({ ...t, runtime: { image: 'x', prepare: [{ type: 'upload_file', source: '/a' }] } }), loc: ['body', 'runtime', 'prepare', 0, 'target'] },
    { name: 'an empty image', body: (t) => ({ ...t, runtime: { image: '  ' } }), loc: ['body', 'runtime', 'image'] },
    { name: 'a bad env name', body: (t) => ({ ...t, agent: { harness: 'shell', custom_shell: { command: 'x' }, env: { 'A B': '1' } } }), loc: ['body', 'agent', 'env', 'A B'] },
    { name: 'swebench_harness without its instance', body: (t) => ({ ...t, evaluator: { strategy: 'swebench_harness' } }), loc: ['body', 'evaluator', 'config', 'instance'] },
    { name: 'swebench_harness with nothing to grade', body: (t) => ({ ...t, evaluator: { strategy: 'swebench_harness', config: { instance: { instance_id: 'x' } } } }), loc: ['body', 'evaluator', 'config', 'instance', 'FAIL_TO_PASS'] },
    { name: 'test_on_output without expected_output_json', body: (t) => ({ ...t, evaluator: { strategy: 'test_on_output', config: { test_command: 'pytest' } } }), loc: ['body', 'evaluator', 'config', 'expected_output_json'] },
  ];
  for (const row of table) {
    it(`answers 422 naming the field for ${row.name}, and starts nothing`, async () => {
      const r = await api('POST', '/rollout/task/submit', row.body(task('bad')));
      expect(r.status).toBe(422);
      expect(r.body.detail.map((d: { loc: unknown }) => d.loc)).toContainEqual(row.loc);
      expect(rt().list()).toEqual([]);
      expect((await api('GET', '/rollout/task/bad')).status).toBe(404);
    });
  }

  it('answers 422 for a body that is not JSON', async () => {
    const r = await api('POST', '/rollout/task/submit', '{nope');
    expect(r.status).toBe(422);
    expect(r.body.detail[0].loc[0]).toBe('body');
  });

  it('refuses a host path with no --path-root, naming the field', async () => {
    const r = await api('POST', '/rollout/task/submit', task('p', { evaluator: { strategy: 'harbor', config: { tests_dir: '/etc' } } }));
    expect(r.status).toBe(400);
    expect(r.body.error.issues[0].path).toBe('evaluator.config.tests_dir');
  });
});

describe('runtime.image', () => {
  let root: string;
  let storeDir: string;
  beforeEach(async () => {
    root = mkdtempSync(join(tmpdir(), 'polar-unit-img-'));
    storeDir = join(root, 'store');
    writeOciLayout(join(root, 'layout'), [tarOf([{ name: 'etc/', type: '5' }, { name: 'etc/marker', content: 'x\n' }])]);
    await new ImageStore(storeDir).import(join(root, 'layout'), { name: 'py-test' });
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));
  const withImage = (id: string, image: string, n = 1): Record<string, unknown> => task(id, { num_samples: n, runtime: { image } });

  it('refuses at submit a task whose image the local store lacks: 422 naming runtime.image with the import command, nothing started', async () => {
    await start({ imageStore: storeDir });
    const r = await api('POST', '/rollout/task/submit', withImage('gone', 'ghcr.io/acme/swe:7', 3));
    expect(r.status).toBe(422);
    expect(r.body.detail).toEqual([{ loc: ['body', 'runtime', 'image'], msg: expect.stringContaining("image 'ghcr.io/acme/swe:7' is not in this server's image store; import it with `rollout image import PATH --name ghcr.io/acme/swe:7`"), type: 'value_error' }]);
    expect(rt().list()).toEqual([]);
    expect((await api('GET', '/rollout/task/gone')).status).toBe(404);
    // Imported now (by its repo name), the same task runs.
    await new ImageStore(storeDir).import(join(root, 'layout'), { name: 'ghcr.io/acme/swe:7' });
    expect((await api('POST', '/rollout/task/submit', withImage('gone', 'ghcr.io/acme/swe:7'))).status).toBe(200);
    const st = await poll('gone');
    expect(st.results[0].metadata).toMatchObject({ image: 'ghcr.io/acme/swe:7', runtime_image: 'ghcr.io/acme/swe:7' });
  });

  it('gives each session the store image runtime.image names, directly or through --image-alias', async () => {
    await start({ imageStore: storeDir, service: { imageAliases: { 'python:3.11': 'py-test', 'ubuntu:22.04': 'nowhere' } } });
    expect((await api('POST', '/rollout/task/submit', withImage('direct', 'py-test'))).status).toBe(200);
    expect((await api('POST', '/rollout/task/submit', withImage('alias', 'docker.io/library/python:3.11', 2))).status).toBe(200);
    // An alias naming an image the store lacks: refused, naming the alias to change.
    const r = await api('POST', '/rollout/task/submit', withImage('other', 'ubuntu:22.04'));
    expect(r.status).toBe(422);
    expect(r.body.detail[0].msg).toContain("image 'nowhere' is not in this server's image store");
    expect(r.body.detail[0].msg).toContain("the alias that maps runtime.image 'ubuntu:22.04'");
    expect((await poll('direct')).results[0].metadata).toMatchObject({ image: 'py-test', runtime_image: 'py-test' });
    for (const s of (await poll('alias')).results) expect(s.metadata).toMatchObject({ image: 'py-test', runtime_image: 'docker.io/library/python:3.11' });
  });

  it('drops runtime.image under --polar-image ignore: the sessions run on the default root', async () => {
    await start({ imageStore: storeDir, service: { polarImage: 'ignore' } });
    expect((await api('POST', '/rollout/task/submit', withImage('ign', 'ghcr.io/acme/never-imported:1'))).status).toBe(200);
    expect((await poll('ign')).results[0].metadata).toMatchObject({ image: null, runtime_image: 'ghcr.io/acme/never-imported:1' });
  });

  it('refuses a host path as runtime.image with 422 naming it, whatever the store', async () => {
    await start();
    const r = await api('POST', '/rollout/task/submit', withImage('sif', '/images/swe.sif'));
    expect(r.status).toBe(422);
    expect(r.body.detail[0]).toMatchObject({ loc: ['body', 'runtime', 'image'], msg: expect.stringContaining('is a host path') });
  });

  it('without a store of its own (a --redis gateway) admits the task: the node that runs it checks its store', async () => {
    await start();
    expect((await api('POST', '/rollout/task/submit', withImage('remote', 'ghcr.io/acme/swe:9'))).status).toBe(200);
    expect((await poll('remote')).results[0].metadata).toMatchObject({ image: 'ghcr.io/acme/swe:9' });
  });
});

describe('Polar tasks on the runtime', () => {
  it('answers 429 at once for num_samples past the queue, with nothing started', async () => {
    await start({ maxQueued: 4 });
    const r = await api('POST', '/rollout/task/submit', task('big', { num_samples: 5 }));
    expect(r.status).toBe(429);
    expect(rt().list()).toEqual([]);
    expect((await api('GET', '/rollout/task/big')).status).toBe(404);
    expect((await api('POST', '/rollout/task/submit', task('fits', { num_samples: 4 }))).status).toBe(200);
    await poll('fits');
  });

  it('answers 429 at once for num_samples above what one task may ask for, naming the field, with nothing started', async () => {
    await start({ service: { maxBatchRollouts: 8 } });
    const huge = await api('POST', '/rollout/task/submit', task('huge', { num_samples: 9 }));
    expect(huge.status).toBe(429);
    expect(huge.body.detail).toMatch(/at most 8 per task/);
    expect(huge.body.error.issues[0].path).toBe('num_samples');
    expect(rt().list()).toEqual([]);
    expect((await api('GET', '/rollout/task/huge')).status).toBe(404);
    expect((await api('POST', '/rollout/task/submit', task('huge', { num_samples: 8 }))).status).toBe(200);
    await poll('huge');
  });

  it('admits waiting sessions by dispatch_priority, higher first, never preempting one started', async () => {
    // The one INIT slot is held 10 s on the clock by each session's sandbox start.
    await start({ stages: { init: 1, run: 8 }, createMs: 10_000 });
    const held = (id: string, priority: number) => task(id, { dispatch_priority: priority });
    const sub = async (id: string, p: number) => expect((await api('POST', '/rollout/task/submit', held(id, p))).status).toBe(200);
    await sub('first', 0);
    await sub('low', 10);
    await sub('high', 90);
    await sub('mid', 50);
    const order = async (): Promise<string[]> => {
      const started: string[] = [];
      for (const id of ['first', 'low', 'high', 'mid']) if ((await api('GET', `/tasks/${id}/sessions`)).body.sessions[0].status !== 'REGISTERED') started.push(id);
      return started;
    };
    await expect.poll(order, { timeout: 5_000, interval: 5 }).toEqual(['first']);
    for (const next of [['first', 'high'], ['first', 'high', 'mid'], ['first', 'low', 'high', 'mid']]) {
      await clock.advance(10_000);
      await expect.poll(order, { timeout: 5_000, interval: 5 }).toEqual(next);
    }
  });

  it('stops the stragglers once early_stop_min_usable_sessions sessions completed usable', async () => {
    await start({ stages: { init: 8, run: 1 } });
    const r = await api('POST', '/rollout/task/submit', task('es', { num_samples: 3, early_stop_min_usable_sessions: 1 }, [bash('sleep 10'), finish]));
    expect(r.status).toBe(200);
    await expect.poll(() => rt().status().stages.run.active, { timeout: 5_000, interval: 5 }).toBe(1);
    await clock.advance(10_000);
    const st = await poll('es');
    expect(st.results.map((s: any) => s.status).sort()).toEqual(['COMPLETED', 'ERROR', 'ERROR']);
    for (const s of st.results.filter((x: any) => x.status === 'ERROR')) {
      expect(s.metadata.early_stopped).toBe(true);
      for (const t of s.trajectory.traces) expect(t.loss_mask.every((m: number) => m === 0)).toBe(true);
    }
  });

  it('ends a session at timeout_seconds as TIMEOUT with reward 0', async () => {
    await start();
    expect((await api('POST', '/rollout/task/submit', task('slow', { timeout_seconds: 5 }, [bash('sleep 3600'), finish]))).status).toBe(200);
    await expect.poll(() => rt().status().stages.run.active, { timeout: 5_000, interval: 5 }).toBe(1);
    await clock.advance(5_000);
    const st = await poll('slow');
    expect(st.results[0].status).toBe('TIMEOUT');
    expect(st.results[0].trajectory.traces[0].reward).toBe(0);
    expect(st.results[0].trajectory.traces[0].loss_mask).toContain(1);
  });

  it('counts timeout_seconds from the session\'s INIT, not from its wait in the queue', async () => {
    // One INIT slot, 10 s per sandbox start: the second session waits 10 s, then needs 10 more.
    await start({ stages: { init: 1, run: 8 }, createMs: 10_000 });
    expect((await api('POST', '/rollout/task/submit', task('queued', { num_samples: 2, timeout_seconds: 15 }))).status).toBe(200);
    await expect.poll(() => rt().status().stages.init.active, { timeout: 5_000, interval: 5 }).toBe(1);
    await clock.advance(10_000);
    await expect.poll(async () => (await api('GET', '/rollout/task/queued')).body.completed_sessions, { timeout: 5_000, interval: 5 }).toBe(1);
    await clock.advance(10_000);
    const st = await poll('queued');
    expect(st.results.map((r: any) => r.status)).toEqual(['COMPLETED', 'COMPLETED']);
  });

  it('lets a cancelled id be submitted again only after the 300 s tombstone', async () => {
    await start();
    expect((await api('POST', '/rollout/task/submit', task('c', {}, [bash('sleep 3600'), finish]))).status).toBe(200);
    const del = await api('DELETE', '/rollout/task/c');
    expect(del.body.status).toBe('cancelled');
    expect((await api('POST', '/rollout/task/submit', task('c'))).status).toBe(409);
    await clock.advance(300_000);
    expect((await api('POST', '/rollout/task/submit', task('c'))).status).toBe(200);
    await poll('c');
    expect((await api('DELETE', '/rollout/task/unknown')).status).toBe(404);
    expect((await api('DELETE', '/rollout/task/unknown?register_if_missing=maybe')).status).toBe(422);
  });

  it('lists tasks by status, harness and since (seconds), newest first, at most limit; a bad query is 422 naming it', async () => {
    await start();
    expect((await api('POST', '/rollout/task/submit', task('old'))).status).toBe(200);
    await poll('old');
    await clock.advance(10_000);
    const mid = clock.now() / 1000;
    expect((await api('POST', '/rollout/task/submit', task('slow', {}, [bash('sleep 3600'), finish]))).status).toBe(200);
    await clock.advance(10_000);
    expect((await api('POST', '/rollout/task/submit', task('gone', {}, [bash('sleep 3600'), finish]))).status).toBe(200);
    expect((await api('DELETE', '/rollout/task/gone')).body.status).toBe('cancelled');
    const ids = async (q: string): Promise<string[]> => (await api('GET', `/tasks${q}`)).body.tasks.map((t: any) => t.task_id);
    expect(await ids('')).toEqual(['gone', 'slow', 'old']);
    expect(await ids('?status=completed')).toEqual(['old']);
    expect(await ids('?status=running')).toEqual(['slow']);
    expect(await ids('?status=cancelled')).toEqual(['gone']);
    expect(await ids('?harness=shell&limit=2')).toEqual(['gone', 'slow']);
    expect(await ids('?harness=codex')).toEqual([]);
    expect(await ids(`?since=${mid}`)).toEqual(['gone', 'slow']);
    expect(await ids(`?since=${clock.now() / 1000 + 1}`)).toEqual([]);
    for (const [q, name] of [['?limit=0', 'limit'], ['?limit=1001', 'limit'], ['?limit=2.5', 'limit'], ['?since=soon', 'since']] as const) {
      const r = await api('GET', `/tasks${q}`);
      expect(r.status).toBe(422);
      expect(r.body.detail[0].loc).toEqual(['query', name]);
    }
    expect((await api('DELETE', '/rollout/task/slow')).status).toBe(200);
  });

  it('posts the TaskResult to callback_url, retrying 503 twice 5 s apart on the clock', async () => {
    await start();
    const seen: { status: number; body: any }[] = [];
    const answers = [503, 429, 200];
    const listener = http.createServer((req, res) => {
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => {
        const status = answers[seen.length] ?? 200;
        seen.push({ status, body: JSON.parse(body) });
        res.writeHead(status).end();
      });
    });
    listener.listen(0, '127.0.0.1');
    await once(listener, 'listening');
    try {
      const cb = `http://127.0.0.1:${(listener.address() as { port: number }).port}/cb`;
      expect((await api('POST', '/rollout/task/submit', task('cb', { callback_url: cb }))).status).toBe(200);
      await expect.poll(() => armed5s, { timeout: 5_000, interval: 5 }).toBe(1);
      expect(seen.length).toBe(1);
      await clock.advance(4_999);
      expect(seen.length).toBe(1);
      await clock.advance(1);
      await expect.poll(() => armed5s, { timeout: 5_000, interval: 5 }).toBe(2);
      expect(seen.length).toBe(2);
      await clock.advance(5_000);
      await expect.poll(() => seen.length, { timeout: 5_000, interval: 5 }).toBe(3);
      expect(seen[2]!.body).toEqual((await api('GET', '/rollout/task/cb')).body);
      expect(warnings.filter((w) => w.includes('callback'))).toEqual([]);
    } finally {
      await new Promise((r) => listener.close(r));
    }
  });

  it('keeps the result pollable when the callback is unreachable, and says so once', async () => {
    await start();
    // Every connection is reset before an answer: a listener that is not there.
    let tries = 0;
    const dead = http.createServer();
    dead.on('connection', (sock) => {
      tries++;
      sock.destroy();
    });
    dead.listen(0, '127.0.0.1');
    await once(dead, 'listening');
    try {
      const port = (dead.address() as { port: number }).port;
      expect((await api('POST', '/rollout/task/submit', task('lost', { callback_url: `http://127.0.0.1:${port}/cb` }))).status).toBe(200);
      const st = await poll('lost');
      expect(st.results[0].status).toBe('COMPLETED');
      for (let i = 1; i <= 2; i++) {
        await expect.poll(() => armed5s, { timeout: 5_000, interval: 5 }).toBe(i);
        await clock.advance(5_000);
      }
      await expect.poll(() => warnings.filter((w) => w.includes('callback not delivered after 3 attempts')).length, { timeout: 5_000, interval: 5 }).toBe(1);
      expect(tries).toBe(3);
      expect((await api('GET', '/rollout/task/lost')).body).toEqual(st);
    } finally {
      await new Promise((r) => dead.close(r));
    }
  });

  it('wants the token on every Polar route but /health, as Bearer or X-Polar-Control-Token', async () => {
    await start({ token: 'sekret' });
    expect((await api('POST', '/rollout/task/submit', task('tok'))).status).toBe(401);
    expect((await api('GET', '/rollout/status')).status).toBe(401);
    expect((await api('POST', '/admin/inference/pause')).status).toBe(401);
    expect((await api('GET', '/health')).status).toBe(200);
    expect((await api('POST', '/rollout/task/submit', task('tok'), { 'x-polar-control-token': 'sekret' })).status).toBe(200);
    expect((await api('GET', '/rollout/task/tok', undefined, { authorization: 'Bearer sekret' })).status).toBe(200);
    expect((await api('GET', '/rollout/task/tok', undefined, { 'x-polar-control-token': 'wrong' })).status).toBe(401);
  });

  it('streams /events as SSE: hello, the task events, a ping after 15 s idle', async () => {
    await start();
    const ac = new AbortController();
    const res = await fetch(`${url}/events`, { signal: ac.signal });
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    const frames: any[] = [];
    const reader = (async () => {
      const dec = new TextDecoder();
      let buf = '';
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        buf += dec.decode(chunk);
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          frames.push(JSON.parse(buf.slice(0, i).replace(/^data: /, '')));
          buf = buf.slice(i + 2);
        }
      }
    })().catch(() => undefined);
    await expect.poll(() => frames.length, { timeout: 5_000, interval: 5 }).toBe(1);
    expect(frames[0].type).toBe('hello');
    expect((await api('POST', '/rollout/task/submit', task('ev'))).status).toBe(200);
    await poll('ev');
    await expect.poll(() => frames.some((f) => f.type === 'task.completed'), { timeout: 5_000, interval: 5 }).toBe(true);
    expect(frames.map((f) => f.type)).toContain('task.created');
    const n = frames.length;
    await clock.advance(15_000);
    await expect.poll(() => frames.length, { timeout: 5_000, interval: 5 }).toBe(n + 1);
    expect(frames[n]).toMatchObject({ type: 'ping', data: {} });
    ac.abort();
    await reader;
  });

  it('pauses new LLM calls and answers once none is in flight; resume lets them go', async () => {
    await start();
    const p = await api('POST', '/admin/inference/pause?timeout_seconds=5');
    expect(p.body).toEqual({ paused: true, drained: true, inflight: 0 });
    expect((await api('POST', '/rollout/task/submit', task('paused'))).status).toBe(200);
    await expect.poll(() => rt().list()[0]?.state, { timeout: 5_000, interval: 5 }).toBe('llmCalling');
    expect((await api('GET', '/rollout/task/paused')).body.completed_sessions).toBe(0);
    expect((await api('POST', '/admin/inference/resume')).body.paused).toBe(false);
    await poll('paused');
    expect((await api('POST', '/admin/inference/pause?timeout_seconds=-1')).status).toBe(422);
  });
});

describe('one runtime under every API', () => {
  it('runs a Polar session, a native /v1 rollout and a ProRL /process under the same supervisor and limits', async () => {
    await start({ stages: { init: 8, run: 1 } });
    expect((await api('POST', '/rollout/task/submit', task('shared', {}, [bash('sleep 3600'), finish]))).status).toBe(200);
    await expect.poll(() => rt().status().stages.run.active, { timeout: 5_000, interval: 5 }).toBe(1);
    const native = await api('POST', '/v1/rollouts', { instance: { data_source: 'harness', instance_id: 'n', oracle: [finish] } });
    expect(native.status).toBe(202);
    // The one RUN slot is the Polar session's: the native rollout waits for it.
    await expect.poll(() => rt().get(native.body.id)?.state, { timeout: 5_000, interval: 5 }).toBe('waitingRun');
    // So does a ProRL /process call (held until its rollout ends).
    const prorl = api('POST', '/process', { instance: { data_source: 'harness', instance_id: 'p', oracle: [finish] }, job_id: 'prorl-1' });
    await expect.poll(() => rt().list().find((x) => x.instanceId === 'p')?.state, { timeout: 5_000, interval: 5 }).toBe('waitingRun');
    expect(rt().status().stages.run.active).toBe(1);
    const session = (await api('GET', '/tasks/shared/sessions')).body.sessions[0].session_id as string;
    // The native API sees the Polar session as the rollout it is.
    const seen = await api('GET', `/v1/rollouts/${session}`);
    expect(seen.body).toMatchObject({ id: session, group_id: 'polar:shared', data_source: 'harness', state: 'acting' });
    expect((await api('DELETE', '/rollout/task/shared')).body.status).toBe('cancelled');
    await expect.poll(async () => (await api('GET', `/v1/rollouts/${native.body.id}`)).body.outcome, { timeout: 5_000, interval: 5 }).toBe('completed');
    const done = await prorl;
    expect(done.status).toBe(200);
    expect(done.body).toMatchObject({ job_id: 'prorl-1' });
  });
});
