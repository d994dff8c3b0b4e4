import { describe, expect, it } from 'vitest';
import { TEST_TOKENS, TestCodec } from '../../../src/testing/index.js';

const codec = new TestCodec();

describe('TestCodec', () => {
  it('round-trips text through encode and decode', () => {
    expect(codec.decode(codec.encode('héllo ✓'))).toBe('héllo ✓');
  });

  it('parses the tool calls an encoded assistant turn carries', () => {
    const ids = codec.encodeAssistant({ content: 'ok', tool_calls: [{ name: 'execute_bash', arguments: { command: 'ls' } }] });
    expect(ids[ids.length - 1]).toBe(TEST_TOKENS.imEnd);
    expect(codec.parseAssistant(ids)).toEqual({ content: 'ok', toolCalls: [{ name: 'execute_bash', arguments: { command: 'ls' } }], malformed: [] });
  });

  it('reports a tool-call block that is not JSON as malformed', () => {
    const p = codec.parseAssistant(codec.encode('<tool_call>{nope</tool_call>'));
    expect(p.toolCalls).toEqual([]);
    expect(p.malformed).toHaveLength(1);
  });

  it('closes a turn cut before its end-of-turn id when continuing', () => {
    const cut = codec.encode('partial');
    expect(codec.encodeContinuation([], cut)[0]).toBe(TEST_TOKENS.imEnd);
    expect(codec.encodeContinuation([], [...cut, TEST_TOKENS.imEnd])[0]).not.toBe(TEST_TOKENS.imEnd);
  });

  it('is append-only: prompt + turn + continuation equals a full re-render', () => {
    const msgs = [{ role: 'user' as const, content: 'hi' }];
    const turn = { content: 'a', tool_calls: [{ name: 'finish', arguments: {} }] };
    const out = codec.encodeAssistant(turn);
    const obs = [{ role: 'tool' as const, content: 'done' }];
    const incremental = [...codec.encodePrompt(msgs, []), ...out, ...codec.encodeContinuation(obs, out)];
    expect(incremental).toEqual(codec.renderFull([...msgs, { role: 'assistant', ...turn }, ...obs], []));
  });
});
