import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import { createRuntime, type EmbeddedRuntime } from '../../../src/runtime/runtime.js';
import { createTestHandler } from '../../../src/testing/index.js';

// The reference's ProRL `/generate` answers `{response_ids, logprobs}` and no finish reason. A
// model that stops on its last allowed token (the end-of-turn id is the max_tokens-th id)
// stopped: it was not cut (#28).

const codec = createQwen3Codec();

let server: http.Server | undefined;
let rt: EmbeddedRuntime | undefined;
afterEach(async () => {
  await rt?.close();
  server?.closeAllConnections();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  rt = server = undefined;
});

/** A server in the reference's format: every `/generate` answers `reply` (no finish reason, no version); `max_tokens` is recorded. */
async function referenceServer(reply: number[], seen: number[]): Promise<string> {
  server = http.createServer((req, res) => {
    if (req.method !== 'POST') return res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}');
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString()) as { max_tokens: number };
      seen.push(body.max_tokens);
      const ids = reply.slice(0, body.max_tokens);
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ response_ids: ids, logprobs: ids.map(() => -0.25) }));
    });
  });
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
  return `prorl+http://127.0.0.1:${(server!.address() as AddressInfo).port}`;
}

describe('ProRL answers without a finish reason', () => {
  it('a turn whose last allowed token is the end-of-turn id is a stop, and the rollout completes', async () => {
    const reply = [...codec.encode('All done here.'), codec.endOfTurnId];
    const seen: number[] = [];
    const address = await referenceServer(reply, seen);
    rt = createRuntime({ backends: [address], codec, handlers: [createTestHandler()], sandboxDriver: 'none', retries: { max: 0, backoffMs: 0, backoffMaxMs: 0 } });
    const r = await rt.submit({ data_source: 'scripted', instance_id: 'p1', no_sandbox: true }, { max_output_tokens: reply.length }).result;
    expect(seen[0]).toBe(reply.length);
    expect(r.trajectory.turns[0]!.outputIds).toEqual(reply);
    expect(r.trajectory.turns[0]!.finishReason).toBe('stop');
    expect(r.finish).toBe('no_tool_call');
    expect(r.outcome).toBe('completed');
  }, 60_000);

  it('a turn cut one token before its end-of-turn id is still a length cut', async () => {
    const reply = [...codec.encode('All done here.'), codec.endOfTurnId];
    const address = await referenceServer(reply, []);
    rt = createRuntime({ backends: [address], codec, handlers: [createTestHandler()], sandboxDriver: 'none', retries: { max: 0, backoffMs: 0, backoffMaxMs: 0 } });
    const r = await rt.submit({ data_source: 'scripted', instance_id: 'p2', no_sandbox: true }, { max_output_tokens: reply.length - 1 }).result;
    expect(r.trajectory.turns[0]!.finishReason).toBe('length');
    expect(r.finish).toBe('length');
    expect(r.outcome).toBe('truncated');
  }, 60_000);
});
