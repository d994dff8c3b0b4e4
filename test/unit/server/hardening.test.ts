import { afterEach, describe, expect, it } from 'vitest';
import net from 'node:net';
import { startHarness, post, get, task, heldTask, type Harness } from './harness.js';
import { jsonDepth } from '../../../src/json-depth.js';

let h: Harness;
afterEach(async () => {
  await h?.close();
});

describe('input hardening', () => {
  it('answers malformed JSON with 400 INVALID_JSON on /v1 and 422 with FastAPI detail on ProRL routes', async () => {
    h = await startHarness();
    const r = await post(`${h.url}/v1/rollouts`, '{"instance": ');
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('INVALID_JSON');
    const p = await post(`${h.url}/process`, '{"instance": ');
    expect(p.status).toBe(422);
    expect(p.body.detail[0]).toMatchObject({ loc: ['body'], type: 'json_invalid' });
  });

  it('names the field paths of wrong types', async () => {
    h = await startHarness();
    const r = await post(`${h.url}/v1/rollouts`, { instance: { data_source: 7 }, sampling_params: { temperature: 'hot' } });
    expect(r.status).toBe(400);
    expect(r.body.error.issues.map((i: { path: string }) => i.path).sort()).toEqual(['instance.data_source', 'sampling_params.temperature']);
    const p = await post(`${h.url}/process`, { instance: { data_source: 7 }, sampling_params: { temperature: 'hot' } });
    expect(p.status).toBe(422);
    expect(p.body.detail.map((d: { loc: string[] }) => d.loc.join('.')).sort()).toEqual(['body.instance.data_source', 'body.sampling_params.temperature']);
  });

  it('refuses unknown top-level keys', async () => {
    h = await startHarness();
    const r = await post(`${h.url}/v1/rollouts`, { instance: task(), extra: 1 });
    expect(r.status).toBe(400);
    expect(r.body.error.issues[0].message).toMatch(/extra/);
  });

  it('answers an unknown data source with 400 naming the field', async () => {
    h = await startHarness();
    const r = await post(`${h.url}/v1/rollouts`, { instance: { data_source: 'astrology' } });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ code: 'UNKNOWN_DATA_SOURCE', issues: [{ path: 'instance.data_source' }] });
  });

  it('answers a body over the limit with 413', async () => {
    h = await startHarness({ bodyLimitBytes: 1024 });
    const r = await post(`${h.url}/process`, { instance: task({ blob: 'x'.repeat(4096) }) });
    expect(r.status).toBe(413);
  });

  it('answers a streamed body over the limit without a length with 413', async () => {
    h = await startHarness({ bodyLimitBytes: 1024 });
    const stream = new ReadableStream({
      start(c) {
        for (let i = 0; i < 8; i++) c.enqueue(new TextEncoder().encode('x'.repeat(512)));
        c.close();
      },
    });
    const res = await fetch(`${h.url}/process`, { method: 'POST', body: stream, duplex: 'half', headers: { 'content-type': 'application/json' } } as RequestInit);
    expect(res.status).toBe(413);
  });

  it('answers a body that does not arrive within bodyTimeoutMs with 408 and closes the connection', async () => {
    h = await startHarness({ bodyTimeoutMs: 50 });
    const { port } = new URL(h.url);
    const timersBefore = h.clock.pending;
    const answer = await new Promise<string>((resolve) => {
      const s = net.connect(Number(port), '127.0.0.1', () => s.write('POST /process HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"inst'));
      let buf = '';
      s.on('data', (d) => (buf += d));
      s.on('close', () => resolve(buf));
      // The body timeout runs on the service's clock: once the server is reading the body (its
      // timer is armed), 50 ms of that clock pass and the 408 goes out.
      void (async () => {
        while (h!.clock.pending === timersBefore) await new Promise((r) => setImmediate(r));
        await h!.clock.advance(50);
      })();
    });
    expect(answer).toMatch(/^HTTP\/1.1 408/);
    expect(answer).toMatch(/REQUEST_TIMEOUT/);
  });

  it('answers nesting deeper than the limit with 400 TOO_DEEP', async () => {
    h = await startHarness({ maxJsonDepth: 16 });
    const r = await post(`${h.url}/process`, '['.repeat(10_000) + ']'.repeat(10_000));
    expect(r.body.error.code).toBe('TOO_DEEP');
  });

  it('counts depth outside strings only', () => {
    expect(jsonDepth('{"a":"[[[[{{{{","b":[[1]]}')).toBe(3);
  });

  it('refuses an overlong string field', async () => {
    h = await startHarness();
    const r = await post(`${h.url}/v1/rollouts`, { instance: { data_source: 'm'.repeat(100_000) } });
    expect(r.status).toBe(400);
    expect(r.body.error.issues[0].path).toBe('instance.data_source');
  });

  it('answers a non-JSON content type with 415', async () => {
    h = await startHarness();
    const res = await fetch(`${h.url}/process`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'a=1' });
    expect(res.status).toBe(415);
  });

  it('refuses text/plain, the type a cross-origin page may POST without a preflight', async () => {
    h = await startHarness();
    const res = await fetch(`${h.url}/process`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: JSON.stringify({ instance: task() }) });
    expect(res.status).toBe(415);
    expect(h.rt().list()).toEqual([]);
  });

  it('answers an unknown path with 404 and a known path with the wrong method with 405', async () => {
    h = await startHarness();
    expect((await get(`${h.url}/nope`)).status).toBe(404);
    const r = await get(`${h.url}/process`);
    expect(r.status).toBe(405);
    expect(r.headers.get('allow')).toBe('POST');
  });

  it('asks for the bearer token when one is set, except on /healthz', async () => {
    h = await startHarness({ token: 's3cret' });
    expect((await get(`${h.url}/status`)).status).toBe(401);
    expect((await get(`${h.url}/status`, { authorization: 'Bearer wrong' })).status).toBe(401);
    expect((await get(`${h.url}/status`, { authorization: 'Bearer s3cret' })).status).toBe(200);
    expect((await get(`${h.url}/healthz`)).status).toBe(200);
  });

  it('refuses a foreign Host name on a loopback service without a token (DNS rebinding)', async () => {
    h = await startHarness();
    const { port } = new URL(h.url);
    const answer = await new Promise<string>((resolve) => {
      const s = net.connect(Number(port), '127.0.0.1', () => s.write(`GET /status HTTP/1.1\r\nHost: evil.example:${port}\r\nConnection: close\r\n\r\n`));
      let buf = '';
      s.on('data', (d) => (buf += d));
      s.on('close', () => resolve(buf));
    });
    expect(answer).toMatch(/^HTTP\/1.1 403/);
    expect((await get(`http://localhost:${port}/status`)).status).toBe(200);
  });

  it('binds 127.0.0.1 by default', async () => {
    h = await startHarness();
    expect(new URL(h.url).hostname).toBe('127.0.0.1');
  });

  it('answers a garbage request line with 400 and stays healthy', async () => {
    h = await startHarness();
    const { port } = new URL(h.url);
    const answer = await new Promise<string>((resolve) => {
      const s = net.connect(Number(port), '127.0.0.1', () => s.write('\x00\x01GARBAGE\r\n\r\n'));
      let buf = '';
      s.on('data', (d) => (buf += d));
      s.on('close', () => resolve(buf));
    });
    expect(answer).toMatch(/^HTTP\/1.1 400/);
    expect((await get(`${h.url}/healthz`)).status).toBe(200);
  });

  it('answers a duplicate live job id with 400', async () => {
    h = await startHarness();
    await post(`${h.url}/v1/rollouts`, { instance: heldTask(), id: 'dup' });
    expect((await post(`${h.url}/v1/rollouts`, { instance: task(), id: 'dup' })).status).toBe(400);
  });
});
