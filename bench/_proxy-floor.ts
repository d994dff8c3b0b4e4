/**
 * The floor of any LLM proxy written on node:http, for bench/proxy-hops.ts: a bare HTTP server on
 * a Unix socket that does only what a token-exact proxy cannot skip, and nothing of ours — it reads
 * the body and `JSON.parse`s it, appends the new message's templated ids to its token list
 * (`codec.encodeContinuation`, the same call our record makes), makes one `HttpBackend.generate`
 * call with that list, and answers a `chat.completion` with the decoded reply. No validation, no
 * state machine, no token record, no events, no limits. Timed with the same Python harness as the
 * proxy, its overhead over direct calls is what Node's HTTP, the Python client and the
 * continuation cost by themselves on this machine.
 *
 * With `dialect` (bench/harness.ts) it does the same for that API dialect, streaming: it takes
 * the new messages' text from the dialect's list (`messages`, `input`, `contents`), and answers
 * with that dialect's event stream for a text answer, written by hand inline — the least any
 * proxy speaking the dialect must do.
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

/** The dialects the floor speaks (bench/harness.ts). */
export type FloorDialect = 'chat' | 'responses' | 'anthropic' | 'google';

export async function startFloorServer(backendUrl: string, codec: ChatCodec, dialect?: FloorDialect): Promise<FloorServer> {
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
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
        const list = dialect ? messagesOf(dialect, body) : (body.messages as Message[]);
        const maxTokens = Number(body.max_tokens ?? body.max_output_tokens ?? (body.generationConfig as { maxOutputTokens?: number } | undefined)?.maxOutputTokens ?? 64);
        if (!ids) ids = codec.encodePrompt(list, []);
        // The messages after the echoed answer: their templated ids follow the sampled ones.
        else for (const id of codec.encodeContinuation(list.slice(seen + 1), last)) ids.push(id);
        seen = list.length;
        const promptLen = ids.length;
        const r = await backend.generate({ rolloutId: 'floor', instance: { data_source: 'bench', instance_id: 'floor' }, turn: seen, promptIds: ids, maxTokens, sampling: { temperature: 1 }, signal: new AbortController().signal }, 60_000);
        for (const id of r.outputIds) ids.push(id);
        last = r.outputIds;
        const content = codec.parseAssistant(r.outputIds).content;
        if (dialect) {
          const out = streamOf(dialect, content, promptLen, r.outputIds.length);
          res.writeHead(200, { 'content-type': 'text/event-stream', 'content-length': Buffer.byteLength(out) });
          res.end(out);
        } else {
          const out = JSON.stringify({ id: 'chatcmpl-floor', object: 'chat.completion', created: 0, model: 'floor', choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: r.finishReason }], usage: { prompt_tokens: promptLen, completion_tokens: r.outputIds.length, total_tokens: ids.length } });
          res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
          res.end(out);
        }
        // Kept for the direct replay once the answer is out, off the harness's clock.
        recorded.push({ promptIds: ids.slice(0, promptLen), maxTokens });
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

type Loose = Record<string, unknown>;

/** The conversation of a dialect's request as role + text (text-only requests, as the bench sends). */
function messagesOf(dialect: FloorDialect, body: Loose): Message[] {
  const textOf = (c: unknown): string => (typeof c === 'string' ? c : ((c as Loose[])[0]?.text as string | undefined) ?? '');
  const out: Message[] = [];
  if (dialect === 'chat') for (const m of body.messages as Loose[]) out.push({ role: m.role as Message['role'], content: textOf(m.content) });
  else if (dialect === 'anthropic') {
    if (body.system) out.push({ role: 'system', content: textOf(body.system) });
    for (const m of body.messages as Loose[]) out.push({ role: m.role as Message['role'], content: textOf(m.content) });
  } else if (dialect === 'responses') {
    if (body.instructions) out.push({ role: 'system', content: body.instructions as string });
    for (const m of body.input as Loose[]) out.push({ role: m.role as Message['role'], content: textOf(m.content) });
  } else {
    const si = body.systemInstruction as { parts: Loose[] } | undefined;
    if (si) out.push({ role: 'system', content: textOf(si.parts) });
    for (const m of body.contents as Loose[]) out.push({ role: m.role === 'model' ? 'assistant' : 'user', content: textOf(m.parts) });
  }
  return out;
}

/** A text answer as the dialect's event stream. */
function streamOf(dialect: FloorDialect, text: string, promptTokens: number, outputTokens: number): string {
  const data = (d: unknown): string => `data: ${JSON.stringify(d)}\n\n`;
  const ev = (name: string, d: Loose): string => `event: ${name}\ndata: ${JSON.stringify({ type: name, ...d })}\n\n`;
  if (dialect === 'chat') {
    const base = { id: 'chatcmpl-floor', object: 'chat.completion.chunk', created: 0, model: 'floor' };
    return data({ ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] }) + data({ ...base, choices: [{ index: 0, delta: { content: text }, finish_reason: null }] }) + data({ ...base, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], usage: { prompt_tokens: promptTokens, completion_tokens: outputTokens } }) + 'data: [DONE]\n\n';
  }
  if (dialect === 'anthropic') {
    return ev('message_start', { message: { id: 'msg_floor', type: 'message', role: 'assistant', model: 'floor', content: [], usage: { input_tokens: promptTokens, output_tokens: 0 } } }) +
      ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) +
      ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text } }) +
      ev('content_block_stop', { index: 0 }) +
      ev('message_delta', { delta: { stop_reason: 'end_turn' }, usage: { output_tokens: outputTokens } }) +
      ev('message_stop', {});
  }
  if (dialect === 'responses') {
    const item = { id: 'msg_floor', type: 'message', role: 'assistant', content: [{ type: 'output_text', text, annotations: [] }] };
    return ev('response.created', { response: { id: 'resp_floor', status: 'in_progress', output: [] } }) +
      ev('response.output_item.added', { output_index: 0, item: { ...item, content: [] } }) +
      ev('response.content_part.added', { item_id: 'msg_floor', output_index: 0, content_index: 0, part: { type: 'output_text', text: '' } }) +
      ev('response.output_text.delta', { item_id: 'msg_floor', output_index: 0, content_index: 0, delta: text }) +
      ev('response.output_text.done', { item_id: 'msg_floor', output_index: 0, content_index: 0, text }) +
      ev('response.content_part.done', { item_id: 'msg_floor', output_index: 0, content_index: 0, part: item.content[0] }) +
      ev('response.output_item.done', { output_index: 0, item }) +
      ev('response.completed', { response: { id: 'resp_floor', status: 'completed', output: [item], usage: { input_tokens: promptTokens, output_tokens: outputTokens } } });
  }
  return data({ candidates: [{ content: { role: 'model', parts: [{ text }] }, finishReason: 'STOP', index: 0 }], usageMetadata: { promptTokenCount: promptTokens, candidatesTokenCount: outputTokens } });
}
