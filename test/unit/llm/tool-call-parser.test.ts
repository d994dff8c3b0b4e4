import { describe, expect, it } from 'vitest';
import { parseToolCalls } from '../../../src/llm/tool-call-parser.js';

describe('parseToolCalls', () => {
  it('returns text without tool-call blocks verbatim as content', () => {
    expect(parseToolCalls('  The answer is 4.\n')).toEqual({ content: '  The answer is 4.\n', toolCalls: [], malformed: [] });
  });

  it('accepts arguments given as a JSON string', () => {
    expect(parseToolCalls('<tool_call>{"name": "bash", "arguments": "{\\"cmd\\": \\"ls\\"}"}</tool_call>').toolCalls).toEqual([{ name: 'bash', arguments: { cmd: 'ls' } }]);
  });

  it('marks a block without a name as malformed', () => {
    expect(parseToolCalls('<tool_call>{"arguments": {}}</tool_call>').malformed[0]!.error).toMatch(/name/);
  });

  it('marks a block whose arguments are not an object as malformed', () => {
    expect(parseToolCalls('<tool_call>{"name": "x", "arguments": [1]}</tool_call>').malformed[0]!.error).toMatch(/arguments/);
  });

  it('marks an unclosed block as malformed and keeps the calls before it', () => {
    const p = parseToolCalls('<tool_call>{"name": "a", "arguments": {}}</tool_call>\n<tool_call>{"name": "b"');
    expect(p.toolCalls).toEqual([{ name: 'a', arguments: {} }]);
    expect(p.malformed).toEqual([{ raw: '<tool_call>{"name": "b"', error: 'unclosed <tool_call> block' }]);
  });
});

describe('parseToolCalls with a reasoning block', () => {
  it('keeps the <think> block in content, exposes its text, and ignores a call written inside it', () => {
    const text = '<think>\nmaybe <tool_call>{"name": "no", "arguments": {}}</tool_call>\n</think>\n\n<tool_call>{"name": "bash", "arguments": {"cmd": "ls"}}</tool_call>';
    const p = parseToolCalls(text);
    expect(p.toolCalls).toEqual([{ name: 'bash', arguments: { cmd: 'ls' } }]);
    expect(p.reasoning).toBe('maybe <tool_call>{"name": "no", "arguments": {}}</tool_call>');
    expect(p.content).toBe('<think>\nmaybe <tool_call>{"name": "no", "arguments": {}}</tool_call>\n</think>');
  });

  it('returns a turn without calls verbatim, reasoning included', () => {
    const text = '<think>\nhm\n</think>\n\nHello.';
    expect(parseToolCalls(text)).toEqual({ content: text, toolCalls: [], malformed: [], reasoning: 'hm' });
  });

  it('reads the calls in the format it is given (llama3_json without reasoning)', () => {
    expect(parseToolCalls('{"name": "bash", "parameters": {"cmd": "pwd"}}', { toolParser: 'llama3_json', reasoning: null }).toolCalls).toEqual([{ name: 'bash', arguments: { cmd: 'pwd' } }]);
  });
});
