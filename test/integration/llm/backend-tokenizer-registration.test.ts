import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { codecFor } from '../../../src/llm/codec-registry.js';
import { startLlmHttpServer, type LlmHttpServer } from '../../../src/llm/llm-http-server.js';
import { FAMILIES } from '../../fixtures/model-families.js';
import { post, startHarness, type Harness } from '../../unit/server/harness.js';
import { fileURLToPath } from 'node:url';
import { createService, type RolloutService } from '../../../src/server/service.js';
import { serviceRuntimeFactory } from '../../../src/server/runtime-factory.js';
import { MemorySandboxProvider } from '../../../src/testing/index.js';

// The repository (its test fixtures and the tokenizer packages in node_modules) is the one path root.
const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/**
 * Registration with a `tokenizer` over the real HTTP routes: the service asks the backend's
 * `POST /tokenize` for a probe's ids and refuses (400, naming the backend) a tokenizer that
 * tokenizes otherwise; a bad directory or parser is a 400 naming the file or the name.
 */
describe('registering a backend with its tokenizer', () => {
  let h: Harness;
  let qwenEngine: LlmHttpServer;
  let silentEngine: LlmHttpServer;
  const qwen3 = codecFor({ tokenizer: FAMILIES.qwen3.dir });

  beforeAll(async () => {
    const generate = async () => ({ outputIds: [], logprobs: [], finishReason: 'stop' as const });
    qwenEngine = await startLlmHttpServer({ engine: { generate, tokenize: (t) => qwen3.encode(t) } });
    silentEngine = await startLlmHttpServer({ engine: { generate } });
    // The model directories an API client may name must lie under a --path-root (#9.12).
    h = await startHarness({ pathRoots: [REPO_ROOT] });
  }, 120_000);

  afterAll(async () => {
    await h.close();
    await qwenEngine.close();
    await silentEngine.close();
  });

  it('accepts a tokenizer that tokenizes as the backend does', async () => {
    const r = await post(`${h.url}/v1/backends`, { address: qwenEngine.url, id: 'q', tokenizer: FAMILIES.qwen3.dir });
    expect(r.status).toBe(201);
  });

  it('refuses a tokenizer of another vocabulary naming the backend (422 at the ProRL route, as FastAPI)', async () => {
    const r = await post(`${h.url}/add_llm_server`, { address: qwenEngine.url, tokenizer: FAMILIES.llama3_1.dir });
    expect(r.status).toBe(422);
    expect(JSON.stringify(r.body)).toMatch(/llama3_1 does not tokenize as the backend at http:\/\/127\.0\.0\.1:\d+: .* at position \d+/);
  }, 120_000);

  it('registers a backend that cannot tokenize unchecked', async () => {
    const r = await post(`${h.url}/v1/backends`, { address: silentEngine.url, id: 's', tokenizer: FAMILIES.llama3_1.dir });
    expect(r.status).toBe(201);
  }, 120_000);

  it('refuses a directory without tokenizer.json and an unknown tool parser, naming them', async () => {
    const a = await post(`${h.url}/v1/backends`, { address: qwenEngine.url, id: 'x', tokenizer: `${REPO_ROOT}/test/fixtures` });
    expect(a.status).toBe(400);
    expect(JSON.stringify(a.body)).toContain('tokenizer.json');
    // Outside the path roots: refused before anything is read.
    const outside = await post(`${h.url}/v1/backends`, { address: qwenEngine.url, id: 'y', tokenizer: '/nonexistent/model' });
    expect([outside.status, JSON.stringify(outside.body)]).toEqual([400, expect.stringContaining('PATH_NOT_ALLOWED')]);
    const b = await post(`${h.url}/add_llm_server`, { address: qwenEngine.url, tool_parser: 'pythonic' });
    expect(b.status).toBe(422);
    expect(JSON.stringify(b.body)).toContain('unknown \\"pythonic\\"');
  });
});

/**
 * Registration without a `tokenizer`: the backend will serve any rollout, tokenized with the
 * service's own codec, so that codec is what is checked against the backend's `/tokenize`.
 */
describe('registering a backend without a tokenizer', () => {
  let service: RolloutService;
  let url: string;
  let qwenEngine: LlmHttpServer;
  let llamaEngine: LlmHttpServer;
  let silentEngine: LlmHttpServer;

  beforeAll(async () => {
    const qwen3 = codecFor({ tokenizer: FAMILIES.qwen3.dir });
    const llama = codecFor({ tokenizer: FAMILIES.llama3_1.dir });
    const generate = async () => ({ outputIds: [], logprobs: [], finishReason: 'stop' as const });
    qwenEngine = await startLlmHttpServer({ engine: { generate, tokenize: (t) => qwen3.encode(t) } });
    llamaEngine = await startLlmHttpServer({ engine: { generate, tokenize: (t) => llama.encode(t) } });
    silentEngine = await startLlmHttpServer({ engine: { generate } });
    // The service tokenizes with Qwen3 (the default of `rollout serve`).
    service = createService({ createRuntime: serviceRuntimeFactory({ codec: qwen3, sandboxes: () => new MemorySandboxProvider(), runtime: { sandboxDriver: 'none' } }), backends: [] }, { port: 0, backendsIntervalMs: 0 });
    url = await service.listen();
  }, 120_000);

  afterAll(async () => {
    await service?.close();
    await Promise.all([qwenEngine?.close(), llamaEngine?.close(), silentEngine?.close()]);
  });

  it('accepts a backend that tokenizes as the service does, and one that cannot tokenize (unchecked)', async () => {
    expect((await post(`${url}/v1/backends`, { address: qwenEngine.url, id: 'q' })).status).toBe(201);
    expect((await post(`${url}/v1/backends`, { address: silentEngine.url, id: 's' })).status).toBe(201);
  });

  it('refuses a backend of another vocabulary, telling to register it with its tokenizer (400 at /v1, 422 at the ProRL route)', async () => {
    const v1 = await post(`${url}/v1/backends`, { address: llamaEngine.url, id: 'l' });
    expect(v1.status).toBe(400);
    expect(v1.body.error.issues[0]).toMatchObject({ path: 'tokenizer' });
    expect(JSON.stringify(v1.body)).toMatch(/the backend at http:\/\/127\.0\.0\.1:\d+ does not tokenize as this service's tokenizer \(hf:.*qwen3.*register it with its model's tokenizer directory/);
    const prorl = await post(`${url}/add_llm_server`, { address: llamaEngine.url });
    expect(prorl.status).toBe(422);
    // Nothing was registered: the pool still has the two good backends only.
    const list = await (await fetch(`${url}/v1/backends`)).json() as { backends: { id: string }[] };
    expect(list.backends.map((b) => b.id).sort()).toEqual(['q', 's']);
  });
});
