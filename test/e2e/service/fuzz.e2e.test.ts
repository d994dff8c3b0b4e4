import { xorshift32 } from '../../../src/rng.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'node:http';
import { startFakeLlmServer, type FakeLlmServer } from '../../../src/testing/fake-llm-server.js';
import { api, serve, shellInstances, SHELL_TASKS, until, type Served } from './harness.js';

const SANDBOX = process.env['ROLLOUT_E2E_SANDBOX'] ?? 'auto';
const BODY_LIMIT = 64 * 1024;

let llm: FakeLlmServer;
let server: Served;

beforeAll(async () => {
  llm = await startFakeLlmServer({ tasks: SHELL_TASKS, latencyMs: 5 });
  server = await serve(['--backend', llm.url, '--sandbox', SANDBOX, '--body-limit', String(BODY_LIMIT)]);
});
afterAll(async () => {
  expect(await server.stop()).toBe(0);
  await llm.close();
});

/** Seeded: the fuzz cases are the same on every run. */
const rng = xorshift32;

interface Case {
  method: string;
  path: string;
  body?: string;
  contentType?: string;
}

const BODY_ROUTES = ['/process', '/cancel', '/add_llm_server', '/v1/rollouts', '/v1/batches', '/v1/backends'];
const EMPTY_ROUTES = ['/start', '/stop', '/clear_llm_server'];

/** Draws from the seeded `r`: an element of a list, a string of `n` printable characters. */
function draws(r: () => number): { pick<T>(xs: readonly T[]): T; str(n: number): string } {
  return {
    pick: (xs) => xs[Math.floor(r() * xs.length)]!,
    str: (n) => Array.from({ length: n }, () => String.fromCharCode(32 + Math.floor(r() * 94))).join(''),
  };
}

/** One request that must be refused with a 4xx. */
function makeCase(r: () => number): Case {
  const { pick, str } = draws(r);
  const junk = (): unknown => pick([() => Math.floor(r() * 1e6), () => str(8), () => null, () => true, () => [1, 'a'], () => ({ [str(5)]: str(3) })])();
  const inst = shellInstances()[0]!;
  switch (Math.floor(r() * 12)) {
    case 0:
      return { method: 'POST', path: pick([...BODY_ROUTES, ...EMPTY_ROUTES]), body: pick(['{', '{"a":', '[1,2', 'nul', '{"instance": {]}', str(20) + '{', '\u0000\u0001']) };
    case 1:
      return { method: 'POST', path: pick(BODY_ROUTES), body: JSON.stringify(junk()) };
    case 2:
      // Not an object: the bodiless ProRL routes ignore unknown keys of an object (as the reference
      // does), so only a body that is no object at all is malformed there.
      return { method: 'POST', path: pick(EMPTY_ROUTES), body: JSON.stringify(pick([[1, str(3)], str(6), Math.floor(r() * 1e6), null, true])) };
    case 3:
      return { method: 'POST', path: pick(BODY_ROUTES), body: '['.repeat(200 + Math.floor(r() * 5000)) + ']'.repeat(10) };
    case 4:
      return { method: 'POST', path: pick(BODY_ROUTES), body: JSON.stringify({ instance: { data_source: 'x'.repeat(BODY_LIMIT + 10) } }) };
    case 5:
      return { method: pick(['GET', 'DELETE', 'PUT', 'PATCH']), path: pick([...BODY_ROUTES.filter((p) => p !== '/v1/rollouts' && p !== '/v1/backends'), ...EMPTY_ROUTES]) };
    case 6:
      return { method: pick(['GET', 'POST']), path: '/' + str(1 + Math.floor(r() * 30)).replace(/[?#%\s]/g, 'z') };
    case 7:
      return { method: 'POST', path: pick(['/process', '/v1/rollouts']), body: JSON.stringify({ instance: { ...inst, data_source: 'no-such-' + str(4) } }) };
    case 8:
      return { method: 'POST', path: pick(BODY_ROUTES), body: 'a=1&b=2', contentType: pick(['application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'image/png']) };
    case 9:
      return { method: 'GET', path: `/v1/rollouts?${pick(['state', 'outcome', 'limit', 'bogus'])}=${encodeURIComponent(pick(['-1', 'nope', '1e9', str(3)]))}` };
    case 10: {
      const id = `nope-${Math.floor(r() * 1e9)}`;
      return pick([
        { method: 'GET', path: `/v1/rollouts/${id}` },
        { method: 'POST', path: `/v1/rollouts/${id}/cancel` },
        { method: 'POST', path: `/v1/backends/${id}/drain` },
        { method: 'DELETE', path: `/v1/backends/${id}` },
      ]);
    }
    default:
      return {
        method: 'POST',
        path: pick(['/process', '/v1/rollouts', '/v1/batches']),
        body: JSON.stringify(
          pick([
            { instance: { ...inst, instance_id: 'i'.repeat(2000) } },
            { instance: inst, sampling_params: { max_iterations: -3 } },
            { instance: inst, sampling_params: { temperature: 'hot' } },
            { instances: [], n: 4 },
            { instances: [inst], n: 0 },
            { instances: [inst], n: 1.5 },
            { instance: inst, job_id: ['not', 'a', 'label'] },
            { instance: [inst] },
          ]),
        ),
      };
  }
}

/**
 * One malformed request to the routes waves 2 and 3 added (buffers, forks, trees, prefixes, token
 * texts, weights, Polar's task API): a body of the wrong shape, an unknown id, a bad query.
 */
function makeLaterCase(r: () => number): Case {
  const { pick, str } = draws(r);
  const junk = (): unknown => pick([() => str(8), () => true, () => [1, 'a'], () => ({ [str(5)]: str(3) }), () => -1, () => 1.5, () => ''])();
  const notObject = (): string => pick(['{', '[1,', 'nul', '\u0000', JSON.stringify([junk()]), JSON.stringify(str(6)), '7', '['.repeat(3000)]);
  // Ids no route knows, hostile ones among them (dots, encoded NULs and slashes, a long one).
  const id = (): string => pick([`nope-${Math.floor(r() * 1e9)}`, '..', '%2e%2e', '%00', '%2F..%2Fetc', 'a'.repeat(3000), encodeURIComponent(str(6))]);
  const inst = shellInstances()[0]!;
  switch (Math.floor(r() * 10)) {
    case 0:
      return {
        method: 'POST',
        path: '/v1/buffers',
        body: pick([
          notObject(),
          JSON.stringify({ instances: junk() }),
          JSON.stringify({ instances: [junk()] }),
          JSON.stringify({ instances: [inst], n: pick([0, -2, 'x', 1.5]) }),
          JSON.stringify({ instances: [inst], groups: pick([0, -1, 'all', [2]]) }),
          JSON.stringify({ instances: [inst], [str(6)]: junk() }),
        ]),
      };
    case 1: {
      const [method, tail, body] = pick([
        ['GET', '', undefined],
        ['DELETE', '', undefined],
        ['POST', '/instances', JSON.stringify({ instances: [inst] })],
        ['POST', '/take', JSON.stringify({ max: 1 })],
        ['POST', '/ack', JSON.stringify({ leases: ['x'] })],
        ['POST', '/release', JSON.stringify({ leases: ['x'] })],
        ['POST', `/groups/${id()}/stop`, '{}'],
      ] as const);
      return { method, path: `/v1/buffers/${id()}${tail}`, body };
    }
    case 2:
      return { method: 'POST', path: `/v1/rollouts/${id()}/fork`, body: pick(['{}', JSON.stringify({ at_turn: 1 }), notObject()]) };
    case 3:
      return { method: 'GET', path: pick([`/v1/groups/${id()}/tree`, `/v1/prefixes/${id()}`, `/v1/rollouts/${id()}/tokens`, `/tasks/${id()}/sessions`, `/rollout/task/${id()}`]) };
    case 4:
      return { method: 'POST', path: '/v1/weights', body: pick([notObject(), JSON.stringify({ version: pick([{ a: 1 }, [1], true]) }), JSON.stringify({ version: 'v1', backends: junk() })]) };
    case 5:
      return { method: pick(['PUT', 'PATCH', 'DELETE']), path: pick(['/v1/weights', '/v1/weights/pause', '/v1/buffers', '/rollout/task/submit', '/nodes']) };
    case 6:
      return { method: 'DELETE', path: `/rollout/task/${id()}` };
    case 7:
      return { method: 'GET', path: `/tasks?${pick([`limit=${pick(['-1', 'nope', '1e400', '', '0', '1001', '2.5'])}`, `since=${pick(['nope', '1e400', ''])}`])}` };
    default:
      return {
        method: 'POST',
        path: '/rollout/task/submit',
        body: pick([
          notObject(),
          '{}',
          JSON.stringify({ task: junk(), agent: { harness: 'codex' } }),
          JSON.stringify({ task: { id: 't', prompt: 'p' }, agent: { harness: str(7) }, num_samples: 1 }),
          JSON.stringify({ task: { id: 't', prompt: 'p' }, agent: { harness: 'codex' }, num_samples: pick([0, -1, 'two', 1.5]) }),
          JSON.stringify({ task: { id: 't', prompt: 'p' }, agent: { harness: 'codex', import_path: 'pkg.Agent' }, num_samples: 1 }),
        ]),
      };
  }
}

function send(base: URL, c: Case): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: base.hostname, port: base.port, method: c.method, path: c.path, headers: c.body !== undefined ? { 'content-type': c.contentType ?? 'application/json', 'content-length': Buffer.byteLength(c.body) } : {} },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    // The server may close the connection after a 413 while we still write: that is an answer too.
    req.on('error', (err) => ((err as NodeJS.ErrnoException).code === 'EPIPE' || (err as NodeJS.ErrnoException).code === 'ECONNRESET' ? resolve(413) : reject(err)));
    req.end(c.body);
  });
}

describe('fuzzing rollout serve', () => {
  it('answers 2,000 random malformed requests with 4xx, stays healthy and loses no accepted job', async () => {
    const base = new URL(server.url);
    const r = rng(20260401);
    const cases = Array.from({ length: 2000 }, () => makeCase(r));
    const accepted: string[] = [];
    const inst = shellInstances();
    const bad: { c: Case; status: number }[] = [];
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < cases.length) {
        const i = next++;
        if (i % 100 === 0) {
          const ok = await api(server.url, 'POST', '/v1/rollouts', { instance: inst[i % inst.length], sampling_params: { max_iterations: 6 } });
          expect(ok.status).toBe(202);
          accepted.push(ok.body.id);
        }
        const status = await send(base, cases[i]!);
        if (status < 400 || status >= 500) bad.push({ c: { ...cases[i]!, body: cases[i]!.body?.slice(0, 80) }, status });
      }
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    expect(bad).toEqual([]);
    expect((await api(server.url, 'GET', '/healthz')).body).toMatchObject({ status: 'ok', runtime: 'running' });
    await until(async () => {
      const rs = await Promise.all(accepted.map((id) => api(server.url, 'GET', `/v1/rollouts/${id}`)));
      return rs.every((x) => x.status === 200 && x.body.outcome !== null);
    }, 25_000);
    const outcomes = await Promise.all(accepted.map(async (id) => (await api(server.url, 'GET', `/v1/rollouts/${id}`)).body.outcome));
    expect(outcomes).toEqual(Array(20).fill('completed'));
  });

  it('answers 1,000 malformed requests to the buffer, fork, tree, prefix, token, weight and Polar task routes with 4xx', async () => {
    const base = new URL(server.url);
    const r = rng(20261202);
    const cases = Array.from({ length: 1000 }, () => makeLaterCase(r));
    const bad: { c: Case; status: number }[] = [];
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < cases.length) {
        const c = cases[next++]!;
        const status = await send(base, c);
        if (status < 400 || status >= 500) bad.push({ c: { ...c, path: c.path.slice(0, 80), body: c.body?.slice(0, 80) }, status });
      }
    };
    await Promise.all(Array.from({ length: 8 }, worker));
    expect(bad).toEqual([]);
    expect((await api(server.url, 'GET', '/healthz')).body).toMatchObject({ status: 'ok', runtime: 'running' });
    // Nothing malformed was admitted: no buffer, no Polar task, no rollout beyond the first test's.
    expect((await api(server.url, 'GET', '/tasks')).body).toMatchObject({ tasks: [] });
  });
});
