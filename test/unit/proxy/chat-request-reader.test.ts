import { describe, expect, it } from 'vitest';
import { chatMessagesOf, OpenAiChatRequestSchema } from '../../../src/llm/openai-chat-route.js';
import { ChatRequestReader, jsonEqual } from '../../../src/proxy/chat-request-reader.js';
import { ProxyRefusal } from '../../../src/proxy/openai-error.js';

const call = (id: string, cmd: string): unknown => ({ id, type: 'function', function: { name: 'bash', arguments: JSON.stringify({ cmd }) } });
/** A growing history with tool calls, as a harness re-sends it. */
function history(turns: number): unknown[] {
  const m: unknown[] = [{ role: 'system', content: 's' }, { role: 'user', content: 'go', extra: 'ignored' }];
  for (let i = 0; i < turns; i++) m.push({ role: 'assistant', content: null, tool_calls: [call(`c${i}`, `ls ${i}`)] }, { role: 'tool', tool_call_id: `c${i}`, content: `out ${i}` });
  return m;
}
/** What validating the whole request from scratch gives. */
function whole(json: unknown): unknown {
  const body = OpenAiChatRequestSchema.parse(json);
  return { body, ...chatMessagesOf(body) };
}
const errorOf = (f: () => unknown): ProxyRefusal => {
  try {
    f();
  } catch (e) {
    return e as ProxyRefusal;
  }
  throw new Error('no error');
};

describe('ChatRequestReader', () => {
  it('gives what validating the whole request gives, as the history grows, is rewritten and is re-sent', () => {
    const r = new ChatRequestReader();
    const reqs = [history(0), history(1), history(3), history(3), [...history(3).slice(0, 2), { role: 'user', content: 'summary' }], history(2), history(4)];
    for (const messages of reqs) {
      const json = JSON.parse(JSON.stringify({ model: 'm', messages, max_tokens: 5, tools: [{ type: 'function', function: { name: 'bash' } }] }));
      expect(r.read(json)).toEqual(whole(json));
    }
  });

  it('reuses the validated tools when a request hands back the same tools object, and validates new ones', () => {
    const r = new ChatRequestReader();
    const tools = [{ type: 'function', function: { name: 'bash', description: 'run', parameters: { type: 'object', properties: { cmd: { type: 'string' } } } } }];
    const first = r.read({ model: 'm', messages: history(0), tools });
    expect(first).toEqual(whole({ model: 'm', messages: history(0), tools }));
    const again = r.read({ model: 'm', messages: history(1), tools, max_tokens: 7 });
    expect(again).toEqual(whole({ model: 'm', messages: history(1), tools, max_tokens: 7 }));
    expect(again.tools).toBe(first.tools);
    // A different object is validated again: a bad one is refused, naming it.
    expect(errorOf(() => r.read({ messages: history(1), tools: [{ type: 'function', function: {} }] })).body.error.param).toBe('tools.0.function.name');
    const other = [{ type: 'function', function: { name: 'ls' } }];
    expect(r.read({ messages: history(2), tools: other })).toEqual(whole({ messages: history(2), tools: other }));
  });

  it('names the index in the whole request when an error is in the new tail', () => {
    const r = new ChatRequestReader();
    r.read({ messages: history(2) });
    const badRole = errorOf(() => r.read({ messages: [...history(2), { role: 'robot', content: 'x' }] }));
    expect(badRole).toBeInstanceOf(ProxyRefusal);
    expect(badRole.body.error.param).toBe('messages.6.role');
    const badArgs = errorOf(() => r.read({ messages: [...history(2), { role: 'assistant', content: '', tool_calls: [{ function: { name: 'bash', arguments: '[1]' } }] }] }));
    expect(badArgs.body.error.message).toContain('messages[6].tool_calls[0]');
    // A changed old message is validated again, not taken from before.
    const edited = history(2);
    edited[1] = { role: 'user', content: 5 };
    expect(errorOf(() => r.read({ messages: edited })).body.error.param).toBe('messages.1.content');
    // Still checked when nothing is new: an empty list and other fields.
    expect(errorOf(() => r.read({ messages: [] })).body.error.param).toBe('messages');
    expect(errorOf(() => r.read({ messages: history(2), max_tokens: -1 })).body.error.param).toBe('max_tokens');
  });

  it('jsonEqual compares JSON values', () => {
    expect(jsonEqual({ a: [1, { b: null }] }, { a: [1, { b: null }] })).toBe(true);
    expect(jsonEqual({ a: 1 }, { a: 1, b: undefined })).toBe(false);
    expect(jsonEqual({ a: 1, b: 2 }, { b: 2, a: 1 })).toBe(true);
    expect(jsonEqual([1, 2], { 0: 1, 1: 2 })).toBe(false);
    expect(jsonEqual({ a: '1' }, { a: 1 })).toBe(false);
    expect(jsonEqual(null, {})).toBe(false);
    // Key sets compared both ways, parsed `__proto__` keys as ordinary own keys.
    expect(jsonEqual({ a: 1, b: 2 }, { a: 1, c: 2 })).toBe(false);
    expect(jsonEqual({ a: 1, b: 2 }, { a: 1 })).toBe(false);
    expect(jsonEqual({}, { a: 1 })).toBe(false);
    expect(jsonEqual(JSON.parse('{"__proto__": {"x": 1}}'), JSON.parse('{"__proto__": {"x": 1}}'))).toBe(true);
    expect(jsonEqual(JSON.parse('{"__proto__": {"x": 1}}'), JSON.parse('{"__proto__": {"x": 2}}'))).toBe(false);
    expect(jsonEqual(JSON.parse('{"__proto__": {"x": 1}}'), {})).toBe(false);
  });
});
