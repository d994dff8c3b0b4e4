import Anthropic from '@anthropic-ai/sdk';
import { GoogleGenAI, type GenerateContentResponse } from '@google/genai';
import OpenAI from 'openai';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { chatCompletion } from '../../../src/llm/openai-chat-route.js';
import { LlmProxy, type ProxyChatCall } from '../../../src/proxy/llm-proxy.js';
import { ProxyRefusal } from '../../../src/proxy/openai-error.js';
import { TestCodec } from '../../../src/testing/test-codec.js';
import { forwardTcp } from './tcp-forward.js';
import { udsRequest } from './http.js';

/**
 * Each dialect through the real proxy socket, with the vendor's official SDK as the client (over a
 * loopback forwarder, as in a sandbox): the SDK's own stream parser assembling our events into its
 * message is the proof the stream is right.
 */
const TOKEN = 'rk-dialects-test';
const codec = new TestCodec();
let dir: string;
let proxy: LlmProxy;
let fwd: { url: string; close(): Promise<void> };

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'dialects-test-'));
  proxy = await LlmProxy.listen({ socketPath: join(dir, 'llm.sock'), token: TOKEN });
  fwd = await forwardTcp(proxy.socketPath);
});
afterEach(async () => {
  await fwd.close();
  await proxy.close();
  await rm(dir, { recursive: true, force: true });
});

type Turn = { content?: string; tool_calls?: { name: string; arguments: Record<string, unknown> }[] };

/** The loop's side: takes the next call and answers it with `turn`, as the harness steps do. */
async function serve(turn: Turn, finishReason: 'stop' | 'length' = 'stop'): Promise<ProxyChatCall> {
  const call = await proxy.next(new AbortController().signal);
  const outputIds = codec.encodeAssistant(turn);
  call.answer(chatCompletion(codec, call.body, { promptIds: [1, 2, 3, 4], outputIds, logprobs: outputIds.map(() => -0.5), finishReason }, { model: codec.name, n: call.seq, returnTokenIds: false }));
  return call;
}

const bash = { name: 'Bash', arguments: { command: 'ls -la' } };

describe('Anthropic Messages through the proxy (@anthropic-ai/sdk)', () => {
  const client = (apiKey = TOKEN): Anthropic => new Anthropic({ apiKey, baseURL: fwd.url, maxRetries: 0 });

  it('streams a tool call that the SDK assembles into a tool_use block, then a text answer', async () => {
    const stream = client().messages.stream({
      model: 'claude-sonnet-4-5',
      max_tokens: 512,
      system: [{ type: 'text', text: 'You are a coding agent.' }],
      messages: [{ role: 'user', content: 'list the files' }],
      tools: [{ name: 'Bash', description: 'run a command', input_schema: { type: 'object', properties: { command: { type: 'string' } } } }],
      thinking: { type: 'enabled', budget_tokens: 1024 },
    });
    const [call, msg] = await Promise.all([serve({ content: 'Listing.', tool_calls: [bash] }), stream.finalMessage()]);
    expect(call.dialect).toBe('anthropic');
    expect(call.enableThinking).toBe(true);
    expect(call.messages).toEqual([{ role: 'system', content: 'You are a coding agent.' }, { role: 'user', content: 'list the files' }]);
    expect(msg.model).toBe('claude-sonnet-4-5');
    expect(msg.stop_reason).toBe('tool_use');
    expect(msg.content).toEqual([{ type: 'text', text: 'Listing.', citations: null }, { type: 'tool_use', id: 'chatcmpl-tool-1-0', name: 'Bash', input: { command: 'ls -la' } }].map((b) => (b.type === 'text' ? expect.objectContaining({ type: 'text', text: 'Listing.' }) : b)));
    expect(msg.usage.input_tokens).toBe(4);

    // The SDK's own echo of its message, with the tool's result, is the next request.
    const next = client().messages.create({
      model: 'claude-sonnet-4-5',
      max_tokens: 512,
      messages: [
        { role: 'user', content: 'list the files' },
        { role: 'assistant', content: msg.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'chatcmpl-tool-1-0', content: 'a.txt' }] },
      ],
    });
    const [call2, msg2] = await Promise.all([serve({ content: 'There is a.txt.' }), next]);
    expect(call2.messages.slice(1)).toEqual([
      { role: 'assistant', content: 'Listing.', tool_calls: [{ id: 'chatcmpl-tool-1-0', name: 'Bash', arguments: { command: 'ls -la' } }] },
      { role: 'tool', content: 'a.txt', tool_call_id: 'chatcmpl-tool-1-0' },
    ]);
    expect(msg2.stop_reason).toBe('end_turn');
    expect(msg2.content).toEqual([expect.objectContaining({ type: 'text', text: 'There is a.txt.' })]);
  });

  it('serves /v1/messages?beta=true and count_tokens', async () => {
    const beta = client().beta.messages.create({ model: 'm', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }], betas: ['context-management-2025-06-27'] });
    const [, msg] = await Promise.all([serve({ content: 'hello' }), beta]);
    expect(msg.content[0]).toMatchObject({ type: 'text', text: 'hello' });
    const n = await client().messages.countTokens({ model: 'm', messages: [{ role: 'user', content: 'count these words please' }] });
    expect(n.input_tokens).toBeGreaterThan(0);
  });

  it('refuses an unknown key with 401 and another rollout\'s with 403, in Anthropic\'s error shape', async () => {
    const other = await LlmProxy.listen({ socketPath: join(dir, 'other.sock'), token: 'rk-other-rollout' });
    await other.close();
    const e401 = await client('rk-never-issued').messages.create({ model: 'm', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e);
    expect(e401).toBeInstanceOf(Anthropic.AuthenticationError);
    const e403 = await client('rk-other-rollout').messages.create({ model: 'm', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e);
    expect(e403).toBeInstanceOf(Anthropic.PermissionDeniedError);
    expect((e403 as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({ type: 'error', error: { type: 'permission_error' } });
  });

  it('answers an image with its 400, and the proxy takes the next request', async () => {
    const bad = await client().messages.create({ model: 'm', max_tokens: 8, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }] }] }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(Anthropic.BadRequestError);
    expect((bad as InstanceType<typeof Anthropic.APIError>).message).toMatch(/messages\.0\.content\.0\.type: the image block is not served/);
    const [, ok] = await Promise.all([serve({ content: 'fine' }), client().messages.create({ model: 'm', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] })]);
    expect(ok.content[0]).toMatchObject({ text: 'fine' });
  });

  it('takes the key from x-api-key and the dialect from the anthropic-version header on another path', async () => {
    const r = udsRequest(proxy.socketPath, 'POST', '/v1/messages', { body: JSON.stringify({ model: 'm', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }), headers: { 'x-api-key': TOKEN, 'anthropic-version': '2023-06-01' } });
    await serve({ content: 'yes' });
    expect(JSON.parse((await r).text)).toMatchObject({ type: 'message', content: [{ type: 'text', text: 'yes' }] });
    const h = udsRequest(proxy.socketPath, 'POST', '/anthropic', { body: JSON.stringify({ model: 'm', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }), headers: { 'x-api-key': TOKEN, 'anthropic-version': '2023-06-01' } });
    const call = await serve({ content: 'yes' });
    expect(call.dialect).toBe('anthropic');
    expect((await h).status).toBe(200);
  });
});

describe('dialect detection', () => {
  it('answers a POST whose path, headers and body name no dialect with a 400 naming the known ones', async () => {
    const r = await udsRequest(proxy.socketPath, 'POST', '/v2/generate', { token: TOKEN, body: JSON.stringify({ prompt: 'hi' }) });
    expect(r.status).toBe(400);
    const e = (JSON.parse(r.text) as { error: { code: string; message: string } }).error;
    expect(e.code).toBe('unknown_dialect');
    expect(e.message).toMatch(/chat, responses, anthropic, google/);
  });
});

describe('OpenAI Responses through the proxy (openai)', () => {
  const client = (apiKey = TOKEN): OpenAI => new OpenAI({ apiKey, baseURL: `${fwd.url}/v1`, maxRetries: 0 });
  const tools: OpenAI.Responses.Tool[] = [
    { type: 'function', name: 'exec_command', description: 'run', parameters: { type: 'object', properties: { cmd: { type: 'string' } } }, strict: false },
    { type: 'web_search' },
  ];

  it('streams a function call the SDK assembles, and takes its echo with the output next', async () => {
    const stream = client().responses.stream({ model: 'gpt-5-codex', instructions: 'You are Codex.', input: [{ role: 'user', content: 'list files' }], tools, store: false });
    const deltas: string[] = [];
    stream.on('response.output_text.delta', (e) => deltas.push(e.delta));
    const [call, resp] = await Promise.all([serve({ content: 'Listing.', tool_calls: [{ name: 'exec_command', arguments: { cmd: 'ls' } }] }), stream.finalResponse()]);
    expect(call.dialect).toBe('responses');
    expect(call.tools.map((t) => t.function.name)).toEqual(['exec_command']);
    expect(proxy.warnings).toEqual(['responses: tools of type "web_search" are not served and were left out of the prompt']);
    expect(deltas).toEqual(['Listing.']);
    expect([resp.model, resp.status, resp.output_text]).toEqual(['gpt-5-codex', 'completed', 'Listing.']);
    const fc = resp.output.find((o) => o.type === 'function_call')!;
    expect(fc).toMatchObject({ name: 'exec_command', call_id: 'chatcmpl-tool-1-0', arguments: '{"cmd":"ls"}' });
    expect(resp.usage?.input_tokens).toBe(4);

    const next = client().responses.create({
      model: 'gpt-5-codex',
      instructions: 'You are Codex.',
      input: [{ role: 'user', content: 'list files' }, ...(resp.output as OpenAI.Responses.ResponseInputItem[]), { type: 'function_call_output', call_id: 'chatcmpl-tool-1-0', output: 'a.txt' }],
      tools,
      store: false,
    });
    const [call2, resp2] = await Promise.all([serve({ content: 'Done.' }), next]);
    expect(call2.messages.slice(2)).toEqual([
      { role: 'assistant', content: 'Listing.', tool_calls: [{ id: 'chatcmpl-tool-1-0', name: 'exec_command', arguments: { cmd: 'ls' } }] },
      { role: 'tool', content: 'a.txt', tool_call_id: 'chatcmpl-tool-1-0' },
    ]);
    expect(resp2.output_text).toBe('Done.');
    expect(proxy.warnings).toHaveLength(1);
  });

  it('answers an image input with a 400 the SDK raises as BadRequestError, and 403 for another rollout\'s key', async () => {
    const bad = await client().responses.create({ model: 'm', input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'data:image/png;base64,AA', detail: 'auto' }] }] }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(OpenAI.BadRequestError);
    expect((bad as InstanceType<typeof OpenAI.APIError>).code).toBe('unsupported_feature');
    const other = await LlmProxy.listen({ socketPath: join(dir, 'other.sock'), token: 'rk-other-live' });
    try {
      const e = await client('rk-other-live').responses.create({ model: 'm', input: 'hi' }).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(OpenAI.PermissionDeniedError);
    } finally {
      await other.close();
    }
  });
});

describe('Google generateContent through the proxy (@google/genai)', () => {
  const client = (apiKey = TOKEN): GoogleGenAI => new GoogleGenAI({ apiKey, httpOptions: { baseUrl: fwd.url } });
  const config = { systemInstruction: 'You are Gemini CLI.', tools: [{ functionDeclarations: [{ name: 'run_shell_command', description: 'run', parametersJsonSchema: { type: 'object', properties: { command: { type: 'string' } } } }] }] };

  it('streams a function call the SDK reads (streamGenerateContent?alt=sse), then takes its echo with the functionResponse', async () => {
    const chunks = (async () => {
      const got: GenerateContentResponse[] = [];
      for await (const c of await client().models.generateContentStream({ model: 'gemini-2.5-pro', contents: [{ role: 'user', parts: [{ text: 'list files' }] }], config })) got.push(c);
      return got;
    })();
    const [call, got] = await Promise.all([serve({ content: 'Listing.', tool_calls: [{ name: 'run_shell_command', arguments: { command: 'ls' } }] }), chunks]);
    expect([call.dialect, call.stream]).toEqual(['google', true]);
    expect(call.messages).toEqual([{ role: 'system', content: 'You are Gemini CLI.' }, { role: 'user', content: 'list files' }]);
    const last = got.at(-1)!;
    expect(got.map((c) => c.text ?? '').join('')).toBe('Listing.');
    expect(last.functionCalls).toEqual([{ id: 'chatcmpl-tool-1-0', name: 'run_shell_command', args: { command: 'ls' } }]);
    expect(last.candidates![0]!.finishReason).toBe('STOP');
    expect(last.usageMetadata?.promptTokenCount).toBe(4);

    const next = client().models.generateContent({
      model: 'gemini-2.5-pro',
      contents: [
        { role: 'user', parts: [{ text: 'list files' }] },
        last.candidates![0]!.content!,
        { role: 'user', parts: [{ functionResponse: { id: 'chatcmpl-tool-1-0', name: 'run_shell_command', response: { output: 'a.txt' } } }] },
      ],
      config,
    });
    const [call2, r2] = await Promise.all([serve({ content: 'Done.' }), next]);
    expect(call2.messages.slice(2)).toEqual([
      { role: 'assistant', content: 'Listing.', tool_calls: [{ id: 'chatcmpl-tool-1-0', name: 'run_shell_command', arguments: { command: 'ls' } }] },
      { role: 'tool', content: 'a.txt', tool_call_id: 'chatcmpl-tool-1-0', name: 'run_shell_command' },
    ]);
    expect(r2.text).toBe('Done.');
    expect(r2.modelVersion).toBe('gemini-2.5-pro');
  });

  it('counts tokens, and answers inline data and another rollout\'s key in Google\'s error shape', async () => {
    const n = await client().models.countTokens({ model: 'gemini-2.5-pro', contents: 'count these words' });
    expect(n.totalTokens).toBeGreaterThan(0);
    const bad = await client().models.generateContent({ model: 'm', contents: [{ role: 'user', parts: [{ inlineData: { mimeType: 'image/png', data: 'AA==' } }] }] }).catch((e: unknown) => e);
    expect((bad as { status: number }).status).toBe(400);
    expect((bad as Error).message).toMatch(/INVALID_ARGUMENT/);
    expect((bad as Error).message).toMatch(/contents\.0\.parts\.0\.inlineData: the inlineData part is not served/);
    const other = await LlmProxy.listen({ socketPath: join(dir, 'other.sock'), token: 'rk-other-google' });
    await other.close();
    const e403 = await client('rk-other-google').models.generateContent({ model: 'm', contents: 'hi' }).catch((e: unknown) => e);
    expect((e403 as { status: number }).status).toBe(403);
    expect((e403 as Error).message).toMatch(/PERMISSION_DENIED/);
  });
});

describe('OpenAI chat completions through the proxy (openai)', () => {
  it('streams with stream_options.include_usage: the SDK sees the usage chunk, the tool call and the requested model', async () => {
    const client = new OpenAI({ apiKey: TOKEN, baseURL: `${fwd.url}/v1`, maxRetries: 0 });
    const stream = client.chat.completions.stream({ model: 'qwen3-coder-plus', messages: [{ role: 'user', content: 'list files' }], tools: [{ type: 'function', function: { name: 'run_shell_command', parameters: { type: 'object' } } }], stream_options: { include_usage: true } });
    const usages: unknown[] = [];
    stream.on('chunk', (c) => usages.push(c.usage));
    const [, done] = await Promise.all([serve({ tool_calls: [{ name: 'run_shell_command', arguments: { command: 'ls' } }] }), stream.finalChatCompletion()]);
    expect(done.model).toBe('qwen3-coder-plus');
    expect(done.choices[0]!.finish_reason).toBe('tool_calls');
    expect(done.choices[0]!.message.tool_calls![0]).toMatchObject({ type: 'function', function: { name: 'run_shell_command', arguments: '{"command":"ls"}' } });
    expect(usages.at(-1)).toMatchObject({ prompt_tokens: 4 });
    expect(usages.slice(0, -1).every((u) => u === null)).toBe(true);
  });
});

describe('parallel requests', () => {
  it('a Gemini request sent while another is unanswered waits and is served: the SDK sees no error and retries nothing', async () => {
    // @google/genai, like the Gemini CLI's own retry (429 and 5xx only), would fail on a 409.
    const client = new GoogleGenAI({ apiKey: TOKEN, httpOptions: { baseUrl: fwd.url } });
    const ask = (text: string) => client.models.generateContent({ model: 'gemini-2.5-flash', contents: [{ role: 'user', parts: [{ text }] }] });
    const main = ask('main task');
    const callA = await proxy.next(new AbortController().signal);
    const side = ask('a title for this session');
    await expect.poll(() => proxy.stats.requests).toBe(2);
    const outputIds = codec.encodeAssistant({ content: 'one' });
    callA.answer(chatCompletion(codec, callA.body, { promptIds: [1], outputIds, logprobs: outputIds.map(() => -1), finishReason: 'stop' }, { model: 'x', n: 1, returnTokenIds: false }));
    const [callB, a, b] = await Promise.all([serve({ content: 'two' }), main, side]);
    expect(callB.messages).toEqual([{ role: 'user', content: 'a title for this session' }]);
    expect([a.text, b.text]).toEqual(['one', 'two']);
    expect(proxy.stats.requests).toBe(2);
    expect([...proxy.stats.byStatus]).toEqual([[200, 2]]);
  });

  it('a Responses stream sent while another is unanswered waits and is served with maxRetries 0 (Codex retries no 409 below its turn loop)', async () => {
    const client = new OpenAI({ apiKey: TOKEN, baseURL: `${fwd.url}/v1`, maxRetries: 0 });
    const ask = (text: string) => client.responses.create({ model: 'gpt-5-codex', input: [{ role: 'user', content: text }], store: false, stream: true }).then(async (s) => {
      let out = '';
      for await (const ev of s) if (ev.type === 'response.output_text.delta') out += ev.delta;
      return out;
    });
    const main = ask('main');
    const callA = await proxy.next(new AbortController().signal);
    const sub = ask('sub-agent');
    await expect.poll(() => proxy.stats.requests).toBe(2);
    const outputIds = codec.encodeAssistant({ content: 'one' });
    callA.answer(chatCompletion(codec, callA.body, { promptIds: [1], outputIds, logprobs: outputIds.map(() => -1), finishReason: 'stop' }, { model: 'x', n: 1, returnTokenIds: false }));
    const [, a, b] = await Promise.all([serve({ content: 'two' }), main, sub]);
    expect([a, b]).toEqual(['one', 'two']);
    expect([...proxy.stats.byStatus]).toEqual([[200, 2]]);
  });
});

describe('retry hints the SDKs read', () => {
  it('a used-up budget (429) is not retried', async () => {
    const client = new Anthropic({ apiKey: TOKEN, baseURL: fwd.url, maxRetries: 8 });
    const p = client.messages.create({ model: 'm', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e);
    const call = await proxy.next(new AbortController().signal);
    call.refuse(new ProxyRefusal({ status: 429, type: 'insufficient_quota', code: 'max_llm_calls', message: 'this rollout\'s max_llm_calls of 1 is used up' }));
    const e = await p;
    expect(e).toBeInstanceOf(Anthropic.RateLimitError);
    expect(proxy.stats.requests).toBe(1);
  });
});

describe('keys', () => {
  it('accepts this rollout\'s key in any of the headers, even beside another', async () => {
    for (const headers of [{ 'x-goog-api-key': TOKEN }, { authorization: 'Bearer sk-something-else', 'x-api-key': TOKEN }] as Record<string, string>[]) {
      const r = await udsRequest(proxy.socketPath, 'GET', '/v1/models', { headers });
      expect(r.status).toBe(200);
    }
    expect((await udsRequest(proxy.socketPath, 'GET', '/v1/models?key=' + TOKEN)).status).toBe(200);
    expect((await udsRequest(proxy.socketPath, 'GET', '/v1/models', { headers: { 'x-api-key': 'sk-nope' } })).status).toBe(401);
  });
});
