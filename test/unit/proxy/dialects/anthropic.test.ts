import { describe, expect, it } from 'vitest';
import { AnthropicDialect } from '../../../../src/proxy/dialects/anthropic.js';
import type { DialectRoute } from '../../../../src/proxy/dialects/dialect.js';
import { ProxyRefusal } from '../../../../src/proxy/openai-error.js';
import { captureResponse, completionOf, refusalOf, sseEvents } from './capture.js';

const route: DialectRoute = { dialect: 'anthropic', op: 'generate' };
const ctx = { warn: () => undefined };
const d = new AnthropicDialect();

function read(body: Record<string, unknown>) {
  return d.read({ model: 'claude-sonnet-4-5', max_tokens: 1024, ...body }, route, ctx);
}

describe('AnthropicDialect.read', () => {
  it('reads system blocks, tool_use and tool_result blocks into the runtime form, tool results ahead of the text', () => {
    const r = read({
      system: [{ type: 'text', text: 'x-anthropic-billing-header: cc_version=2.1; cch=abc123;\nYou are Claude Code.' }, { type: 'text', text: 'Be brief.', cache_control: { type: 'ephemeral' } }],
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'list files' }, { type: 'text', text: '<system-reminder>x</system-reminder>' }] },
        { role: 'assistant', content: [{ type: 'thinking', thinking: 'hmm', signature: 's' }, { type: 'text', text: 'Looking.' }, { type: 'tool_use', id: 'toolu_1', name: 'Bash', input: { command: 'ls' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: 'a.txt' }] }, { type: 'text', text: 'go on' }] },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_2', name: 'Read', input: { path: 'b' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_2', content: 'no such file', is_error: true }] },
      ],
      tools: [{ name: 'Bash', description: 'run', input_schema: { type: 'object', properties: { command: { type: 'string' } } } }],
      stream: true,
      thinking: { type: 'enabled', budget_tokens: 2000 },
    });
    expect(r.messages).toEqual([
      { role: 'system', content: 'You are Claude Code.\nBe brief.' },
      { role: 'user', content: 'list files\n<system-reminder>x</system-reminder>' },
      { role: 'assistant', content: 'Looking.', tool_calls: [{ id: 'toolu_1', name: 'Bash', arguments: { command: 'ls' } }] },
      { role: 'tool', content: 'a.txt', tool_call_id: 'toolu_1' },
      { role: 'user', content: 'go on' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'toolu_2', name: 'Read', arguments: { path: 'b' } }] },
      { role: 'tool', content: '[Tool Error] no such file', tool_call_id: 'toolu_2' },
    ]);
    expect(r.tools).toEqual([{ type: 'function', function: { name: 'Bash', description: 'run', parameters: { type: 'object', properties: { command: { type: 'string' } } } } }]);
    expect([r.stream, r.maxTokens, r.model, r.enableThinking]).toEqual([true, 1024, 'claude-sonnet-4-5', true]);
  });

  it('maps thinking disabled to the template switch off, and absent to not said', () => {
    expect(read({ messages: [{ role: 'user', content: 'hi' }], thinking: { type: 'disabled' } }).enableThinking).toBe(false);
    expect(read({ messages: [{ role: 'user', content: 'hi' }] }).enableThinking).toBeUndefined();
  });

  it('refuses an image block with a 400 naming the block', () => {
    const r = refusalOf(() => read({ messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA' } }] }] }));
    expect([r.status, r.code, r.param]).toEqual([400, 'unsupported_feature', 'messages.0.content.0.type']);
    expect(r.message).toMatch(/image block is not served/);
  });

  it('refuses a server-side tool with a 400 naming it', () => {
    const r = refusalOf(() => read({ messages: [{ role: 'user', content: 'hi' }], tools: [{ type: 'web_search_20250305', name: 'web_search', max_uses: 5 }] }));
    expect([r.status, r.param]).toEqual([400, 'tools.0.type']);
    expect(r.message).toMatch(/server-side tool "web_search_20250305"/);
  });

  it('names the field of a malformed message', () => {
    expect(refusalOf(() => read({ messages: [{ role: 'system', content: 'x' }] })).param).toBe('messages.0.role');
    expect(refusalOf(() => read({ messages: [{ role: 'user', content: [{ type: 'tool_result' }] }] })).param).toBe('messages.0.content.0.tool_use_id');
    expect(refusalOf(() => read({ messages: 'hi' })).param).toBe('messages');
    expect(refusalOf(() => read({ messages: [{ role: 'user', content: 'x' }], max_tokens: -1 })).param).toBe('max_tokens');
  });
});

describe('AnthropicDialect.write', () => {
  const turn = { content: 'Running it.', tool_calls: [{ name: 'Bash', arguments: { command: 'ls -la' } }] };

  it('writes a message with text and tool_use blocks, stop_reason tool_use and the requested model', () => {
    const { res, out } = captureResponse();
    d.write(res, completionOf(turn), read({ messages: [{ role: 'user', content: 'hi' }] }));
    expect(out.status).toBe(200);
    const m = JSON.parse(out.text) as Record<string, unknown>;
    expect(m).toMatchObject({ type: 'message', role: 'assistant', model: 'claude-sonnet-4-5', stop_reason: 'tool_use', stop_sequence: null, usage: { input_tokens: 5 } });
    expect(m.content).toEqual([{ type: 'text', text: 'Running it.' }, { type: 'tool_use', id: 'chatcmpl-tool-1-0', name: 'Bash', input: { command: 'ls -la' } }]);
  });

  it('says end_turn and max_tokens for a stop and a cut answer', () => {
    for (const [finish, reason] of [['stop', 'end_turn'], ['length', 'max_tokens']] as const) {
      const { res, out } = captureResponse();
      d.write(res, completionOf({ content: 'ok' }, finish), read({ messages: [{ role: 'user', content: 'hi' }] }));
      expect((JSON.parse(out.text) as { stop_reason: string }).stop_reason).toBe(reason);
    }
  });

  it('streams message_start, one start/delta/stop per block, message_delta with the stop reason, message_stop', () => {
    const { res, out } = captureResponse();
    d.write(res, completionOf(turn), read({ messages: [{ role: 'user', content: 'hi' }], stream: true }));
    expect(out.headers['content-type']).toBe('text/event-stream');
    const ev = sseEvents(out.text);
    expect(ev.map((e) => e.event)).toEqual(['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
    for (const e of ev) expect((e.data as { type: string }).type).toBe(e.event);
    expect(ev[2]!.data).toEqual({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Running it.' } });
    expect(ev[4]!.data).toEqual({ type: 'content_block_start', index: 1, content_block: { type: 'tool_use', id: 'chatcmpl-tool-1-0', name: 'Bash', input: {} } });
    expect(JSON.parse((ev[5]!.data as { delta: { partial_json: string } }).delta.partial_json)).toEqual({ command: 'ls -la' });
    expect(ev[7]!.data).toMatchObject({ delta: { stop_reason: 'tool_use' }, usage: { output_tokens: expect.any(Number) } });
  });

  it('streams reasoning kept apart as a thinking block first', () => {
    const c = completionOf({ content: 'Answer.' });
    (c.choices as { message: Record<string, unknown> }[])[0]!.message.reasoning_content = 'Let me think.';
    const { res, out } = captureResponse();
    d.write(res, c, read({ messages: [{ role: 'user', content: 'hi' }], stream: true }));
    const ev = sseEvents(out.text);
    expect(ev[1]!.data).toMatchObject({ index: 0, content_block: { type: 'thinking' } });
    expect(ev[2]!.data).toMatchObject({ delta: { type: 'thinking_delta', thinking: 'Let me think.' } });
    expect(ev[3]!.data).toMatchObject({ delta: { type: 'signature_delta' } });
  });

  it('shapes errors as Anthropic does', () => {
    expect(d.errorBody(new ProxyRefusal({ status: 401, type: 'invalid_request_error', code: 'invalid_api_key', message: 'bad key' }))).toEqual({ type: 'error', error: { type: 'authentication_error', message: 'bad key' } });
    expect(d.errorBody(new ProxyRefusal({ status: 429, type: 'insufficient_quota', code: 'max_llm_calls', message: 'used up' }))).toEqual({ type: 'error', error: { type: 'rate_limit_error', message: 'used up' } });
  });
});

describe('AnthropicDialect over a growing history', () => {
  it('hands the re-sent messages back as the same objects and reads only the new ones', () => {
    const dd = new AnthropicDialect();
    const m0 = { role: 'user', content: [{ type: 'text', text: 'task' }] };
    const m1 = { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'Bash', input: { command: 'ls' } }] };
    const first = dd.read({ system: 'S', messages: [m0, m1, { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'a' }] }] }, route, ctx);
    // Re-sent as fresh JSON (what a harness does), plus a new turn.
    const again = JSON.parse(JSON.stringify([m0, m1, { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'a' }] }])) as unknown[];
    const second = dd.read({ system: 'S', messages: [...again, { role: 'assistant', content: 'done' }, { role: 'user', content: 'thanks' }] }, route, ctx);
    expect(second.messages.slice(0, 4)).toEqual(first.messages);
    for (let i = 1; i < 4; i++) expect(second.messages[i]).toBe(first.messages[i]);
    expect(second.messages.slice(4)).toEqual([{ role: 'assistant', content: 'done' }, { role: 'user', content: 'thanks' }]);
    // A changed message is read again, and a bad new one is still named by its index.
    const third = dd.read({ messages: [m0, { role: 'assistant', content: 'edited' }] }, route, ctx);
    expect(third.messages[1]).toEqual({ role: 'assistant', content: 'edited' });
    expect(refusalOf(() => dd.read({ messages: [m0, { role: 'assistant', content: 'edited' }, { role: 'bogus', content: 'x' }] }, route, ctx)).param).toBe('messages.2.role');
  });
});
