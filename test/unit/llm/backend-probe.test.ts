import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { probeBackend, TOKENIZER_PROBE, verdict } from '../../../src/llm/backend-probe.js';

// Servers with the route tables of the engines (what answers 200, what 404s), on loopback.
type Routes = Record<string, (body: Record<string, unknown>) => [number, unknown]>;
const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

async function serve(routes: Routes): Promise<string> {
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let raw = '';
    req.on('data', (d: Buffer) => (raw += d.toString()));
    req.on('end', () => {
      const route = routes[`${req.method} ${req.url}`];
      const [status, body] = route ? route(raw ? (JSON.parse(raw) as Record<string, unknown>) : {}) : [404, { detail: 'Not Found' }];
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const vllm: Routes = {
  'GET /v1/models': () => [200, { object: 'list', data: [{ id: 'Qwen/Qwen3-8B', object: 'model', owned_by: 'vllm' }] }],
  'POST /v1/completions': () => [200, { choices: [{ text: 'x', token_ids: [5] }] }],
  'POST /tokenize': () => [200, { tokens: [1, 2, 3], count: 3 }],
};

describe('probeBackend', () => {
  it('tells a ProRL address at a vLLM server to use vllm+http://', async () => {
    const host = await serve(vllm);
    const p = await probeBackend(`http://${host}`);
    expect(p).toMatchObject({ ok: false, reachable: true, kind: 'vllm', model: 'Qwen/Qwen3-8B', suggestion: `vllm+http://${host}` });
    expect(p.detail).toBe(`the prorl route at http://${host} does not work (HTTP 404); the server looks like vLLM; its vllm route answers: use vllm+http://${host}`);
  });

  it('accepts a vllm+ address at a vLLM server and names its model', async () => {
    const host = await serve(vllm);
    const p = await probeBackend(`vllm+http://${host}`);
    expect(p).toMatchObject({ ok: true, kind: 'vllm', model: 'Qwen/Qwen3-8B', suggestion: null });
  });

  it('recognises SGLang by /get_model_info and suggests sglang+http://', async () => {
    const host = await serve({
      'GET /v1/models': () => [200, { data: [{ id: 'default', object: 'model' }] }],
      'GET /get_model_info': () => [200, { model_path: '/models/qwen3', is_generation: true }],
      'POST /generate': (b) => (Array.isArray(b['input_ids']) ? [200, { meta_info: {} }] : [400, { error: 'need input_ids' }]),
    });
    const p = await probeBackend(`http://${host}`);
    expect(p).toMatchObject({ ok: false, kind: 'sglang', suggestion: `sglang+http://${host}` });
    expect((await probeBackend(`sglang+http://${host}`)).ok).toBe(true);
  });

  it("reads an engine's parallel slots from /props (llama.cpp, llm-serve) or /get_server_info (SGLang), null from vLLM", async () => {
    const llama = await serve({ ...vllm, 'GET /props': () => [200, { total_slots: 6, default_generation_settings: {} }] });
    expect(await probeBackend(`vllm+http://${llama}`)).toMatchObject({ ok: true, slots: 6 });
    const sglang = await serve({
      'GET /v1/models': () => [200, { data: [{ id: 'default', object: 'model', owned_by: 'sglang' }] }],
      'GET /get_server_info': () => [200, { max_running_requests: 48 }],
      'POST /generate': () => [200, { meta_info: {} }],
    });
    const p = await probeBackend(`sglang+http://${sglang}`);
    expect(p).toMatchObject({ ok: true, slots: 48 });
    expect(p.detail).toContain('48 slots');
    expect((await probeBackend(`vllm+http://${await serve(vllm)}`)).slots).toBeNull();
  });

  it('catches a prorl+ address at a server that does not name itself by its route, and suggests the protocol whose route answers', async () => {
    // Like `rollout fake-llm --protocol vllm`: /v1/models without owned_by, a 400 to other bodies.
    const host = await serve({
      'GET /v1/models': () => [200, { object: 'list', data: [{ id: 'default', object: 'model' }] }],
      'POST /generate': () => [400, { error: 'no vllm route for POST /generate with this body' }],
      'POST /v1/completions': () => [200, { choices: [{ text: 'x', token_ids: [5] }] }],
    });
    const p = await probeBackend(`prorl+http://${host}`);
    expect(p).toMatchObject({ ok: false, reachable: true, suggestion: `vllm+http://${host}` });
    expect(p.detail).toBe(`the prorl route at http://${host} does not work (HTTP 400); its vllm route answers: use vllm+http://${host}`);
    const s = await probeBackend(`sglang+http://${host}`);
    expect(s).toMatchObject({ ok: false, suggestion: `vllm+http://${host}` });
  });

  it("reads the engine's context window from /v1/models max_model_len (vLLM, SGLang) or /props n_ctx (llama.cpp)", async () => {
    const v = await serve({ ...vllm, 'GET /v1/models': () => [200, { data: [{ id: 'm', object: 'model', owned_by: 'vllm', max_model_len: 2048 }] }] });
    const pv = await probeBackend(`vllm+http://${v}`);
    expect(pv).toMatchObject({ ok: true, contextLength: 2048 });
    expect(pv.detail).toContain('context 2048 tokens');
    const l = await serve({ ...vllm, 'GET /props': () => [200, { total_slots: 2, default_generation_settings: { n_ctx: 4096 } }] });
    expect(await probeBackend(`vllm+http://${l}`)).toMatchObject({ ok: true, slots: 2, contextLength: 4096 });
    expect((await probeBackend(`vllm+http://${await serve(vllm)}`)).contextLength).toBeNull();
  });

  it('fails fast and says why on a port nothing listens on', async () => {
    const host = await serve({});
    await new Promise((r) => servers.pop()!.close(r));
    const p = await probeBackend(`http://${host}`, { timeoutMs: 2000 });
    expect(p).toMatchObject({ ok: false, reachable: false });
    expect(p.detail).toMatch(/cannot reach http:\/\/127\.0\.0\.1:\d+: ECONNREFUSED/);
  });

  it('reports a malformed address without probing anything', async () => {
    const p = await probeBackend('ftp://x:1');
    expect(p).toMatchObject({ ok: false, spec: null, reachable: false });
    expect(p.detail).toContain('ftp://x:1');
  });

  it('fails a backend whose tokenizer differs from ours on the probe text, and passes one that matches', async () => {
    const host = await serve(vllm);
    const wrong = await probeBackend(`vllm+http://${host}`, { encode: () => [9, 9] });
    expect(wrong).toMatchObject({ ok: false, tokenizerMatches: false });
    expect(wrong.detail).toContain('tokenizer differs');
    let seen = '';
    const right = await probeBackend(`vllm+http://${host}`, { encode: (t) => ((seen = t), [1, 2, 3]) });
    expect(right).toMatchObject({ ok: true, tokenizerMatches: true });
    expect(seen).toBe(TOKENIZER_PROBE);
  });
});

describe('verdict', () => {
  it("fits only a 2xx in the protocol's own answer shape: a refused body is no fit, whatever the server calls itself", () => {
    expect(verdict('prorl', { status: 200, body: { response_ids: [5], logprobs: [-1] } })).toBe(true);
    expect(verdict('prorl', { status: 400, body: { error: 'no vllm route for POST /generate with this body' } })).toBe('HTTP 400');
    expect(verdict('prorl', { status: 200, body: { meta_info: {} } })).toBe('HTTP 200 without a prorl answer');
    expect(verdict('sglang', { status: 200, body: { meta_info: {}, output_ids: [5] } })).toBe(true);
    expect(verdict('vllm', { status: 200, body: { choices: [] } })).toBe(true);
    expect(verdict('openai', { status: 200, body: { data: [] } })).toBe(true);
    expect(verdict('prorl', { status: 404, body: {} })).toBe('HTTP 404');
    expect(verdict('prorl', { status: 503, body: {} })).toBe('HTTP 503');
    expect(verdict('prorl', 'ECONNRESET')).toBe('ECONNRESET');
  });
});
