import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { codecFor } from '../../../src/llm/codec-registry.js';
import { startLlmHttpServer, type LlmHttpServer } from '../../../src/llm/llm-http-server.js';
import { FAMILIES } from '../../fixtures/model-families.js';
import { post, startHarness, type Harness } from '../../unit/server/harness.js';
import { fileURLToPath } from 'node:url';

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
