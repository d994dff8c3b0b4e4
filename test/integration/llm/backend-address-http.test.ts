import { afterEach, describe, expect, it } from 'vitest';
import { get, post, startHarness, type Harness } from '../../unit/server/harness.js';

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

describe('backend addresses at the service', () => {
  it.each(['true', '../../etc/passwd'])('refuses %j naming the address (422 at /add_llm_server as FastAPI would, 400 at /v1/backends), and registers nothing', async (address) => {
    h = await startHarness({}, { backends: [] });
    const a = await post(`${h.url}/add_llm_server`, { address });
    expect(a.status).toBe(422);
    expect(JSON.stringify(a.body)).toMatch(/invalid backend address/);
    const b = await post(`${h.url}/v1/backends`, { address });
    expect(b.status).toBe(400);
    expect(JSON.stringify(b.body)).toMatch(/address/);
    expect((await get(`${h.url}/v1/backends`)).body.backends).toEqual([]);
  });

  it('refuses a bad address while stopped too, instead of buffering it', async () => {
    h = await startHarness({}, { startStopped: true });
    expect((await post(`${h.url}/add_llm_server`, { address: 'true' })).status).toBe(422);
  });

  it('takes the built-in oracle backend by name', async () => {
    h = await startHarness();
    expect((await post(`${h.url}/add_llm_server`, { address: 'oracle' })).status).toBe(200);
  });

  it('registers two paths on one host:port as two OpenAI backends', async () => {
    h = await startHarness({}, { backends: [] });
    expect((await post(`${h.url}/add_llm_server`, { address: 'http://127.0.0.1:9001/a/v1' })).status).toBe(200);
    expect((await post(`${h.url}/add_llm_server`, { address: 'http://127.0.0.1:9001/b/v1' })).status).toBe(200);
    const list = (await get(`${h.url}/v1/backends`)).body.backends as { id: string; url: string; protocol: string }[];
    expect(list.map((b) => [b.id, b.url, b.protocol])).toEqual([
      ['127.0.0.1:9001/a/v1', 'http://127.0.0.1:9001/a/v1', 'openai'],
      ['127.0.0.1:9001/b/v1', 'http://127.0.0.1:9001/b/v1', 'openai'],
    ]);
  });
});
