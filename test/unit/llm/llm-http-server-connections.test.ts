import { afterEach, describe, expect, it } from 'vitest';
import net from 'node:net';
import { startLlmHttpServer, type Engine, type LlmHttpServer } from '../../../src/llm/llm-http-server.js';

/** An engine that answers at once: what is measured here is the server's connection handling. */
const engine: Engine = { generate: async () => ({ outputIds: [1, 2], logprobs: [-0.1, -0.2], finishReason: 'stop' }) };

let server: LlmHttpServer | undefined;
const sockets: net.Socket[] = [];
afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  await server?.close();
  server = undefined;
});

/** `n` loopback TCP connections that never send a byte; resolves once all are connected, with their close promises. */
async function silent(port: number, n: number): Promise<Promise<void>[]> {
  const closed: Promise<void>[] = [];
  const connected: Promise<void>[] = [];
  for (let i = 0; i < n; i++) {
    const s = net.connect(port, '127.0.0.1');
    sockets.push(s);
    s.on('error', () => undefined);
    closed.push(new Promise((r) => s.once('close', () => r())));
    connected.push(new Promise((r) => s.once('connect', () => r())));
  }
  await Promise.all(connected);
  return closed;
}

describe('the LLM engine server under a flood of silent connections (#28 §5.7)', () => {
  it('keeps /health and /generate answering at the connection cap and closes silent connections after connectionIdleMs', async () => {
    server = await startLlmHttpServer({ engine, maxConnections: 10, connectionIdleMs: 400 });
    const closed = await silent(server.port, 60);
    let n = 0;
    for (const c of closed) void c.then(() => n++);
    await expect.poll(() => n).toBeGreaterThanOrEqual(50);
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
    const gen = await fetch(`${server.url}/generate`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input_ids: [5, 6], sampling_params: { max_new_tokens: 2 } }) });
    expect(gen.status).toBe(200);
    // The rest, silent past connectionIdleMs, are closed too.
    await Promise.all(closed);
    expect(server.connections.evicted).toBeGreaterThanOrEqual(50);
    expect(server.connections.timedOut).toBeGreaterThan(0);
  });
});
