/**
 * The floor of any LLM proxy written on node:http, for bench/proxy-hops.ts: a bare HTTP server on
 * a Unix socket that does only what a token-exact proxy cannot skip, and nothing of ours — it reads
 * the body and `JSON.parse`s it, appends the new message's templated ids to its token list
 * (`codec.encodeContinuation`, the same call our record makes), makes one `HttpBackend.generate`
 * call with that list, and answers a `chat.completion` with the decoded reply. No validation, no
 * state machine, no token record, no events, no limits. Timed with the same Python harness as the
 * proxy, its overhead over direct calls is what Node's HTTP, the Python client and the
 * continuation cost by themselves on this machine.
 */
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { HttpBackend } from '../src/llm/http-backend.js';
import type { ChatCodec } from '../src/llm/chat-codec.js';
import type { Message } from '../src/protocol/messages.js';

export interface FloorServer {
  socketPath: string;
  /** The prompt ids of each call, in order (for the direct replay). */
  recorded: { promptIds: number[]; maxTokens: number }[];
  close(): Promise<void>;
}

export async function startFloorServer(backendUrl: string, codec: ChatCodec): Promise<FloorServer> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-proxy-floor-'));
  const socketPath = path.join(dir, 'floor.sock');
  const backend = new HttpBackend({ id: 'floor', url: backendUrl, protocol: 'prorl' });
  const recorded: FloorServer['recorded'] = [];
  let ids: number[] | null = null;
  let last: number[] = [];
  let seen = 0;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { messages: Message[]; max_tokens: number };
        if (!ids) ids = codec.encodePrompt(body.messages, []);
        // The messages after the echoed answer: their templated ids follow the sampled ones.
        else for (const id of codec.encodeContinuation(body.messages.slice(seen + 1), last)) ids.push(id);
        seen = body.messages.length;
        const promptLen = ids.length;
        const r = await backend.generate({ rolloutId: 'floor', instance: { data_source: 'bench', instance_id: 'floor' }, turn: seen, promptIds: ids, maxTokens: body.max_tokens, sampling: { temperature: 1 }, signal: new AbortController().signal }, 60_000);
        for (const id of r.outputIds) ids.push(id);
        last = r.outputIds;
        const out = JSON.stringify({ id: 'chatcmpl-floor', object: 'chat.completion', created: 0, model: 'floor', choices: [{ index: 0, message: { role: 'assistant', content: codec.parseAssistant(r.outputIds).content }, finish_reason: r.finishReason }], usage: { prompt_tokens: promptLen, completion_tokens: r.outputIds.length, total_tokens: ids.length } });
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
        res.end(out);
        // Kept for the direct replay once the answer is out, off the harness's clock.
        recorded.push({ promptIds: ids.slice(0, promptLen), maxTokens: body.max_tokens });
      })();
    });
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  return {
    socketPath,
    recorded,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      backend.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
