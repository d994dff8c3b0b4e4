import { describe, expect, it } from 'vitest';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import { findDrift } from '../../../src/llm/drift-detector.js';
import type { Message, ToolSchema } from '../../../src/protocol/messages.js';

const codec = createQwen3Codec();
const IM_END = 151645;
const tools: ToolSchema[] = [{ type: 'function', function: { name: 'bash', description: 'Run a command', parameters: { type: 'object', properties: { cmd: { type: 'string' } } } } }];

/** Runs turns append-only and returns the incremental ids with the messages (assistant turns carry token_ids). */
function converse(turns: { output: number[]; reply: Message[] }[], opts?: { enableThinking?: boolean }) {
  const messages: Message[] = [
    { role: 'system', content: 'You are an agent.' },
    { role: 'user', content: 'List the files.' },
  ];
  let ids = codec.encodePrompt(messages, tools, opts);
  for (const t of turns) {
    const p = codec.parseAssistant(t.output);
    messages.push({ role: 'assistant', content: p.content, ...(p.toolCalls.length ? { tool_calls: p.toolCalls } : {}), token_ids: t.output });
    messages.push(...t.reply);
    ids = [...ids, ...t.output, ...codec.encodeContinuation(t.reply, t.output, opts)];
  }
  return { ids, messages };
}

describe('createQwen3Codec', () => {
  it('renders the first prompt with the tools block and ends with the assistant generation prompt', () => {
    const text = codec.decode(codec.encodePrompt([{ role: 'user', content: 'hi' }], tools));
    expect(text).toContain('<tools>\n{"type": "function", "function": {"name": "bash"');
    expect(text.endsWith('<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n')).toBe(true);
  });

  it('builds append-only prompts equal to a full re-render across tool and user turns', () => {
    const a1 = codec.encodeAssistant({ content: 'Looking.', tool_calls: [{ name: 'bash', arguments: { cmd: 'ls' } }] });
    const a2 = codec.encodeAssistant({ tool_calls: [{ name: 'bash', arguments: { cmd: 'cat a' } }, { name: 'bash', arguments: { cmd: 'cat b' } }] });
    const { ids, messages } = converse([
      { output: a1, reply: [{ role: 'tool', content: 'a\nb', name: 'bash' }] },
      { output: a2, reply: [{ role: 'tool', content: 'A' }, { role: 'tool', content: 'B' }] },
      { output: codec.encodeAssistant({ content: 'Two files.' }), reply: [{ role: 'user', content: 'Thanks, now stop.' }] },
    ]);
    expect(findDrift(3, codec.renderFull!(messages, tools), ids)).toBeNull();
  });

  it('reports no drift for sampled ids that are not the canonical tokenization of their text', () => {
    // "hello" sampled as single letters: BPE would merge them, but the sampled ids are what the model saw.
    const letters = [...'hello'].flatMap((c) => codec.encode(c));
    const { ids, messages } = converse([{ output: [...letters, IM_END], reply: [{ role: 'user', content: 'again' }] }]);
    expect(findDrift(1, codec.renderFull!(messages, tools), ids)).toBeNull();
  });

  it('closes a turn cut by max_tokens with the end-of-turn token and newline, as the template would', () => {
    const cut = codec.encode('I will run ls');
    const cont = codec.encodeContinuation([{ role: 'user', content: 'go on' }], cut);
    expect(codec.decode(cont)).toBe('<|im_end|>\n<|im_start|>user\ngo on<|im_end|>\n<|im_start|>assistant\n');
  });

  it('starts a continuation after a closed turn with the newline the template puts after the end-of-turn token', () => {
    const cont = codec.encodeContinuation([{ role: 'tool', content: 'ok' }], [...codec.encode('x'), IM_END]);
    expect(codec.decode(cont)).toBe('\n<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n<|im_start|>assistant\n');
  });

  it('adds the empty think block to the generation prompt when thinking is disabled', () => {
    const cont = codec.encodeContinuation([{ role: 'user', content: 'q' }], [IM_END], { enableThinking: false });
    expect(codec.decode(cont).endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n')).toBe(true);
  });

  it('reports the stripping of an earlier <think> block as drift', () => {
    const thinking = [...codec.encode('<think>\nLet me see.\n</think>\n\nls'), IM_END];
    const { ids, messages } = converse([{ output: thinking, reply: [{ role: 'user', content: 'next' }] }]);
    const drift = findDrift(1, codec.renderFull!(messages, tools), ids);
    expect(drift).not.toBeNull();
    expect(drift!.actual).toBe(151667); // <think>, which the template dropped
  });

  it('parses several tool calls of one turn and keeps the text around them as content', () => {
    const ids = codec.encode('Checking.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>\n<tool_call>\n{"name": "finish", "arguments": {}}\n</tool_call>');
    const p = codec.parseAssistant([...ids, IM_END]);
    expect(p).toEqual({ content: 'Checking.', toolCalls: [{ name: 'bash', arguments: { cmd: 'ls' } }, { name: 'finish', arguments: {} }], malformed: [] });
  });

  it('marks a tool call whose JSON does not parse as malformed instead of throwing', () => {
    const p = codec.parseAssistant(codec.encode('<tool_call>\n{"name": "bash", "arguments": {cmd: ls}}\n</tool_call>'));
    expect(p.toolCalls).toEqual([]);
    expect(p.malformed).toHaveLength(1);
    expect(p.malformed[0]!.error).toMatch(/invalid JSON/);
  });

  it('renders an assistant turn for a scripted policy ending with the end-of-turn token', () => {
    const ids = codec.encodeAssistant({ content: 'ok', tool_calls: [{ name: 'bash', arguments: { cmd: 'ls' } }] });
    expect(ids.at(-1)).toBe(IM_END);
    expect(codec.decode(ids)).toBe('ok\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call><|im_end|>');
  });

  it('decodes what it encodes for plain text', () => {
    const text = 'def f(x):\n    return x ** 2  # ünïcode';
    expect(codec.decode(codec.encode(text))).toBe(text);
  });
});

describe('createQwen3Codec drift check without token_ids', () => {
  it('splices the ids parseAssistant decoded when the assistant message carries none', () => {
    const c = createQwen3Codec();
    const letters = [...'world'].flatMap((ch) => c.encode(ch));
    const output = [...letters, IM_END];
    const messages: Message[] = [{ role: 'user', content: 'hi' }];
    let ids = c.encodePrompt(messages, []);
    const p = c.parseAssistant(output);
    messages.push({ role: 'assistant', content: p.content }, { role: 'user', content: 'more' });
    ids = [...ids, ...output, ...c.encodeContinuation([{ role: 'user', content: 'more' }], output)];
    expect(findDrift(1, c.renderFull!(messages, []), ids)).toBeNull();
  });
});
