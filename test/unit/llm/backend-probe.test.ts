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
    expect(p.detail).toContain(`this looks like vLLM: use vllm+http://${host}`);
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
  const prorl = { id: 'h:1', url: 'http://h:1', protocol: 'prorl' as const };
  it('counts a refused body on an existing route as a fit, unless the server is another engine', () => {
    expect(verdict(prorl, 'openai', 400)).toBe(true);
    expect(verdict(prorl, 'sglang', 400)).toBe('HTTP 400');
    expect(verdict(prorl, 'unknown', 404)).toBe('HTTP 404');
    expect(verdict(prorl, 'unknown', 503)).toBe('HTTP 503');
    expect(verdict(prorl, 'unknown', 'ECONNRESET')).toBe('ECONNRESET');
  });
});
