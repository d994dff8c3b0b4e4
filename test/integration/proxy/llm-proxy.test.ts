import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { chatCompletion } from '../../../src/llm/openai-chat-route.js';
import { LlmProxy, MAX_OPEN_CALLS, type ProxyChatCall } from '../../../src/proxy/llm-proxy.js';
import { TestCodec } from '../../../src/testing/test-codec.js';
import { chatBody, udsRequest } from './http.js';
import { haveTools } from '../../helpers/system-tools.js';

const TOKEN = 'rk-test-token';
let dir: string;
let proxy: LlmProxy;
const codec = new TestCodec();

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'llm-proxy-test-'));
  proxy = await LlmProxy.listen({ socketPath: join(dir, 'llm.sock'), token: TOKEN, maxBodyBytes: 1024 * 1024 });
});
afterEach(async () => {
  await proxy.close();
  await rm(dir, { recursive: true, force: true });
});

/** Answers `call` with an assistant turn rendered by the test codec. */
function answer(call: ProxyChatCall, turn: { content?: string; tool_calls?: { name: string; arguments: Record<string, unknown> }[] }): void {
  const outputIds = codec.encodeAssistant(turn);
  call.answer(chatCompletion(codec, call.body, { promptIds: [1, 2, 3], outputIds, logprobs: outputIds.map(() => -0.5), finishReason: 'stop' }, { model: proxy.model, n: call.seq, returnTokenIds: false }));
}

function errorOf(text: string): { message: string; type: string; param: string | null; code: string | null } {
  const j = JSON.parse(text) as { error: { message: string; type: string; param: string | null; code: string | null } };
  expect(Object.keys(j.error).sort()).toEqual(['code', 'message', 'param', 'type']);
  return j.error;
}

describe('LlmProxy over a Unix socket', () => {
  it('lists its model on GET /v1/models', async () => {
    const r = await udsRequest(proxy.socketPath, 'GET', '/v1/models', { token: TOKEN });
    expect(r.status).toBe(200);
    expect(JSON.parse(r.text)).toEqual({ object: 'list', data: [{ id: 'rollout-policy', object: 'model', created: 0, owned_by: 'rollout-runtime' }] });
  });

  it('refuses another rollout\'s token with 401 and an OpenAI-style error body', async () => {
    const r = await udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: 'rk-other-rollout', body: chatBody([{ role: 'user', content: 'hi' }]) });
    expect(r.status).toBe(401);
    expect(errorOf(r.text).code).toBe('invalid_api_key');
    const none = await udsRequest(proxy.socketPath, 'GET', '/v1/models');
    expect(none.status).toBe(401);
  });

  it('hands a chat request to the loop and answers it with tool calls in OpenAI\'s format', async () => {
    const pending = udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', {
      token: TOKEN,
      body: chatBody([{ role: 'system', content: 's' }, { role: 'user', content: 'list files' }], { tools: [{ type: 'function', function: { name: 'bash', parameters: { type: 'object' } } }] }),
    });
    const call = await proxy.next(new AbortController().signal);
    expect(call.messages.map((m) => m.role)).toEqual(['system', 'user']);
    expect(call.tools[0]!.function.name).toBe('bash');
    answer(call, { tool_calls: [{ name: 'bash', arguments: { command: 'ls' } }] });
    const r = await pending;
    expect(r.status).toBe(200);
    const j = JSON.parse(r.text) as { object: string; choices: { message: { role: string; content: string | null; tool_calls: { id: string; type: string; function: { name: string; arguments: string } }[] }; finish_reason: string }[] };
    expect(j.object).toBe('chat.completion');
    expect(j.choices[0]!.finish_reason).toBe('tool_calls');
    const tc = j.choices[0]!.message.tool_calls[0]!;
    expect([tc.type, tc.function.name, JSON.parse(tc.function.arguments)]).toEqual(['function', 'bash', { command: 'ls' }]);
    expect(typeof tc.id).toBe('string');
  });

  it('streams the answer as chat.completion.chunk events ending with data: [DONE]', async () => {
    const pending = udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: chatBody([{ role: 'user', content: 'hi' }], { stream: true }) });
    const call = await proxy.next(new AbortController().signal);
    expect(call.stream).toBe(true);
    answer(call, { content: 'hello there', tool_calls: [{ name: 'bash', arguments: { command: 'pwd' } }] });
    const r = await pending;
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toBe('text/event-stream');
    const events = r.text.split('\n\n').filter(Boolean);
    expect(events.at(-1)).toBe('data: [DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.replace(/^data: /, '')) as { object: string; choices: { delta: Record<string, unknown>; finish_reason: string | null }[] });
    expect(chunks.every((c) => c.object === 'chat.completion.chunk')).toBe(true);
    expect(chunks[0]!.choices[0]!.delta.role).toBe('assistant');
    const text = chunks.map((c) => (c.choices[0]!.delta.content as string | undefined) ?? '').join('');
    expect(text).toBe('hello there');
    const calls = chunks.flatMap((c) => (c.choices[0]!.delta.tool_calls as { index: number; function: { name: string; arguments: string } }[] | undefined) ?? []);
    expect(calls.map((c) => [c.index, c.function.name, JSON.parse(c.function.arguments)])).toEqual([[0, 'bash', { command: 'pwd' }]]);
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe('tool_calls');
  });

  it('answers malformed JSON, an unknown role and bad tool-call arguments with 400 naming the problem', async () => {
    const bad = await udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: '{"messages": [' });
    expect([bad.status, errorOf(bad.text).code]).toEqual([400, 'invalid_json']);
    const role = await udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: chatBody([{ role: 'wizard', content: 'x' }]) });
    expect(role.status).toBe(400);
    expect(errorOf(role.text).param).toBe('messages.0.role');
    const args = await udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', {
      token: TOKEN,
      body: chatBody([{ role: 'assistant', content: null, tool_calls: [{ type: 'function', function: { name: 'bash', arguments: 'not json' } }] }]),
    });
    expect(args.status).toBe(400);
    expect(errorOf(args.text).message).toMatch(/messages\[0\]\.tool_calls\[0\]\.function\.arguments/);
    // The proxy still serves.
    expect((await udsRequest(proxy.socketPath, 'GET', '/v1/models', { token: TOKEN })).status).toBe(200);
  });

  it('refuses a body nested deeper than 64 with 400 invalid_json, however deep, and still serves', async () => {
    for (const depth of [65, 200_000]) {
      const content = '['.repeat(depth - 3) + ']'.repeat(depth - 3);
      const r = await udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: `{"model":"x","messages":[{"role":"user","content":${content}}]}` });
      expect([r.status, errorOf(r.text).code, errorOf(r.text).message]).toEqual([400, 'invalid_json', 'JSON nested deeper than 64']);
    }
    const ok = udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: chatBody([{ role: 'user', content: 'still here' }]) });
    answer(await proxy.next(new AbortController().signal), { content: 'yes' });
    expect((await ok).status).toBe(200);
  });

  it('reads a re-sent history it skips parsing as a whole parse would: same 400s for a bad continuation, same messages after', async () => {
    const history = [{ role: 'system', content: 'be "brief" \\ ]' }, { role: 'user', content: 'hi' }];
    const first = udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: chatBody(history) });
    answer(await proxy.next(new AbortController().signal), { content: 'hello' });
    expect((await first).status).toBe(200);
    const grown = [...history, { role: 'assistant', content: 'hello' }, { role: 'user', content: 'again' }];
    const text = chatBody(grown);
    const cases = [
      [text.replace(/\]\}$/, ',]}'), 'malformed JSON'],
      [text.replace(/\]\}$/, `,${'['.repeat(70)}${']'.repeat(70)}]}`), 'JSON nested deeper than 64'],
    ] as const;
    for (const [body, message] of cases) {
      const r = await udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body });
      expect([r.status, errorOf(r.text).code, errorOf(r.text).message.slice(0, message.length)]).toEqual([400, 'invalid_json', message]);
    }
    // A later duplicate history key is the one read, as JSON.parse keeps the last.
    const dup = udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: text.replace(/\}$/, ',"messages":[{"role":"user","content":"only me"}]}') });
    const d = await proxy.next(new AbortController().signal);
    expect(d.messages).toEqual([{ role: 'user', content: 'only me' }]);
    answer(d, { content: 'ok' });
    expect((await dup).status).toBe(200);
    const next = udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: text });
    const n = await proxy.next(new AbortController().signal);
    expect(n.messages.map((m) => [m.role, m.content])).toEqual(grown.map((m) => [m.role, m.content]));
    answer(n, { content: 'fine' });
    expect((await next).status).toBe(200);
  });

  it('refuses a 50 MB prompt with 413 without buffering it', async () => {
    const big = chatBody([{ role: 'user', content: 'x'.repeat(50 * 1024 * 1024) }]);
    const r = await udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: big });
    expect([r.status, errorOf(r.text).code]).toEqual([413, 'request_too_large']);
  });

  it('queues a chat request sent while another is unanswered and hands it to the loop once that one is answered', async () => {
    const first = udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: chatBody([{ role: 'user', content: 'a' }]) });
    const call = await proxy.next(new AbortController().signal);
    const second = udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: chatBody([{ role: 'user', content: 'b' }]) });
    const third = udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: chatBody([{ role: 'user', content: 'c' }]) });
    await expect.poll(() => proxy.stats.requests).toBe(3);
    answer(call, { content: 'one' });
    expect((await first).status).toBe(200);
    // In arrival order, one at a time: the loop sees b, then c.
    const b = await proxy.next(new AbortController().signal);
    expect(b.messages.at(-1)!.content).toBe('b');
    answer(b, { content: 'two' });
    const c = await proxy.next(new AbortController().signal);
    expect(c.messages.at(-1)!.content).toBe('c');
    answer(c, { content: 'three' });
    const [r2, r3] = await Promise.all([second, third]);
    expect([r2.status, r3.status]).toEqual([200, 200]);
    expect([r2.text, r3.text].map((t) => (JSON.parse(t) as { choices: { message: { content: string } }[] }).choices[0]!.message.content)).toEqual(['two', 'three']);
    expect(proxy.stats.byStatus.get(409)).toBeUndefined();
  });

  it('answers 409 to a chat request beyond MAX_OPEN_CALLS open ones, with retry hints', async () => {
    const open = Array.from({ length: MAX_OPEN_CALLS }, (_, i) => udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: chatBody([{ role: 'user', content: `q${i}` }]) }));
    await expect.poll(() => proxy.stats.requests).toBe(MAX_OPEN_CALLS);
    const over = await udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: chatBody([{ role: 'user', content: 'one too many' }]) });
    expect([over.status, errorOf(over.text).code, over.headers['x-should-retry']]).toEqual([409, 'request_in_flight', 'true']);
    for (let i = 0; i < MAX_OPEN_CALLS; i++) answer(await proxy.next(new AbortController().signal), { content: `a${i}` });
    expect((await Promise.all(open)).map((r) => r.status)).toEqual(Array(MAX_OPEN_CALLS).fill(200));
  });

  it('drops a waiting request whose harness hung up: the loop never samples it', async () => {
    const first = udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: chatBody([{ role: 'user', content: 'a' }]) });
    const call = await proxy.next(new AbortController().signal);
    const gone = request({ socketPath: proxy.socketPath, method: 'POST', path: '/v1/chat/completions', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' } });
    gone.on('error', () => {});
    gone.end(chatBody([{ role: 'user', content: 'hung up' }]));
    await expect.poll(() => proxy.stats.requests).toBe(2);
    const closed = new Promise((r) => gone.on('close', r));
    gone.destroy();
    await closed;
    const kept = udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: chatBody([{ role: 'user', content: 'kept' }]) });
    await expect.poll(() => proxy.stats.requests).toBe(3);
    answer(call, { content: 'one' });
    expect((await first).status).toBe(200);
    const next = await proxy.next(new AbortController().signal);
    expect(next.messages.at(-1)!.content).toBe('kept');
    answer(next, { content: 'two' });
    expect((await kept).status).toBe(200);
  });

  it('refuses every waiting request with 410 when the rollout ends', async () => {
    const held = udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: chatBody([{ role: 'user', content: 'a' }]) });
    await proxy.next(new AbortController().signal);
    const waiting = [1, 2].map((i) => udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: chatBody([{ role: 'user', content: `w${i}` }]) }));
    await expect.poll(() => proxy.stats.requests).toBe(3);
    proxy.end('finished');
    expect((await Promise.all([held, ...waiting])).map((r) => r.status)).toEqual([410, 410, 410]);
  });

  it('answers 410 to chat requests after the rollout ended, and to the one it held', async () => {
    const held = udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: chatBody([{ role: 'user', content: 'a' }]) });
    await proxy.next(new AbortController().signal);
    proxy.end('finished');
    const r = await held;
    expect([r.status, errorOf(r.text).code]).toEqual([410, 'rollout_ended']);
    const later = await udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: chatBody([{ role: 'user', content: 'b' }]) });
    expect(later.status).toBe(410);
  });

  it('survives 10,000 tiny requests on keep-alive connections, then still answers a chat', async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 8 });
    try {
      const kinds = [
        () => udsRequest(proxy.socketPath, 'GET', '/v1/models', { token: TOKEN, agent }),
        () => udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: '{', agent }),
        () => udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: 'nope', body: '{}', agent }),
        () => udsRequest(proxy.socketPath, 'GET', '/v2/nothing', { token: TOKEN, agent }),
      ];
      const statuses = new Map<number, number>();
      for (let i = 0; i < 10_000; i += 100) {
        const rs = await Promise.all(Array.from({ length: 100 }, (_, j) => kinds[(i + j) % 4]!()));
        for (const r of rs) statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
      }
      expect(Object.fromEntries(statuses)).toEqual({ 200: 2500, 400: 2500, 401: 2500, 404: 2500 });
    } finally {
      agent.destroy();
    }
    const pending = udsRequest(proxy.socketPath, 'POST', '/v1/chat/completions', { token: TOKEN, body: chatBody([{ role: 'user', content: 'still there?' }]) });
    answer(await proxy.next(new AbortController().signal), { content: 'yes' });
    expect((await pending).status).toBe(200);
  });

  it.skipIf(!haveTools('python3'))('serves a Python standard-library client over AF_UNIX', async () => {
    const script = [
      'import http.client, json, socket, sys',
      'class C(http.client.HTTPConnection):',
      '    def connect(self):',
      '        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); self.sock.connect(sys.argv[1])',
      'c = C("localhost")',
      'body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})',
      'c.request("POST", "/v1/chat/completions", body, {"Authorization": "Bearer " + sys.argv[2], "Content-Type": "application/json"})',
      'r = c.getresponse(); print(r.status, json.loads(r.read())["choices"][0]["message"]["content"])',
    ].join('\n');
    const child = spawn('python3', ['-c', script, proxy.socketPath, TOKEN]);
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((r) => child.on('close', r));
    answer(await proxy.next(new AbortController().signal), { content: 'hello from the loop' });
    expect(await exited).toBe(0);
    expect(out.trim()).toBe('200 hello from the loop');
  });

  it('removes its socket file on close', async () => {
    await proxy.close();
    expect(existsSync(join(dir, 'llm.sock'))).toBe(false);
  });
});
