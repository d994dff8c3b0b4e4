import { describe, expect, it } from 'vitest';
import type { ChatCodec } from '../../../src/llm/chat-codec.js';
import { codecFor } from '../../../src/llm/codec-registry.js';
import type { GenerateRequest } from '../../../src/llm/llm-client.js';
import { openaiProtocol } from '../../../src/llm/protocols/index.js';
import { TOOL_PARSER_NAMES } from '../../../src/llm/tool-parsers/index.js';
import { FAMILIES, GPT_OSS, type Family } from '../../fixtures/model-families.js';

// Re-tokenized mode: an OpenAI chat server that returns no token ids answers content and tool
// calls; the client renders them with the rollout's codec into the turn's ids, and the runtime
// parses those ids back into the assistant message. Both the text and the calls must survive,
// whatever the family's template does to a historical turn (#28: DeepSeek-V3 lost the call,
// Llama 3.1 the text, Gemma 3 — whose template renders no tools — the call).

const quiet = { onWarning: () => undefined };
const codecOf = (f: Family): ChatCodec => codecFor(f.name === 'qwen3' ? {} : { tokenizer: f.dir }, quiet);
const FAMS = [...Object.values(FAMILIES), GPT_OSS];

const reqFor = (codec: ChatCodec): GenerateRequest => ({
  rolloutId: 'r',
  instance: { data_source: 'x', instance_id: 'i' },
  turn: 0,
  promptIds: [],
  maxTokens: 512,
  sampling: {},
  signal: new AbortController().signal,
  chat: { messages: [{ role: 'user', content: 'go' }], tools: [], codec },
});

const wire = (name: string, args: Record<string, unknown>, i: number) => ({ id: `call_${i}`, type: 'function', function: { name, arguments: JSON.stringify(args) } });

/** The turn's ids as the client makes them from the reply, parsed back as the runtime does. */
function roundTrip(codec: ChatCodec, message: Record<string, unknown>, finish = 'tool_calls') {
  const r = openaiProtocol.parse({ choices: [{ message, finish_reason: finish }] }, reqFor(codec));
  expect(r.tokenSource).toBe('retokenized');
  return codec.parseAssistant(r.outputIds);
}

describe.each(FAMS.map((f) => [f.name, f] as const))('re-tokenized reply, %s', (_name, f) => {
  const codec = codecOf(f);

  it('keeps the text and the tool call of a reply that has both', () => {
    const p = roundTrip(codec, { content: 'Let me list the files.', tool_calls: [wire('execute_bash', { command: 'ls -la' }, 0)] });
    expect(p.content.trim()).toBe('Let me list the files.');
    expect(p.toolCalls).toEqual([{ name: 'execute_bash', arguments: { command: 'ls -la' } }]);
    expect(p.malformed).toEqual([]);
  });

  it('keeps the text and both calls of a reply with two', () => {
    const p = roundTrip(codec, { content: 'Two things.', tool_calls: [wire('read', { path: 'a.txt' }, 0), wire('read', { path: 'b.txt', lines: [1, 2] }, 1)] });
    expect(p.content.trim()).toBe('Two things.');
    expect(p.toolCalls).toEqual([
      { name: 'read', arguments: { path: 'a.txt' } },
      { name: 'read', arguments: { path: 'b.txt', lines: [1, 2] } },
    ]);
  });

  it('keeps a calls-only reply and a text-only reply', () => {
    expect(roundTrip(codec, { content: null, tool_calls: [wire('finish', {}, 0)] }).toolCalls).toEqual([{ name: 'finish', arguments: {} }]);
    const t = roundTrip(codec, { content: 'All done.' }, 'stop');
    expect(t.content.trim()).toBe('All done.');
    expect(t.toolCalls).toEqual([]);
  });
});

describe('re-tokenized reply with every tool parser (Qwen3 vocabulary, the parser named)', () => {
  for (const name of TOOL_PARSER_NAMES.filter((n) => n !== 'openai')) {
    it(`${name}: keeps the text and the call`, () => {
      const codec = codecFor({ toolParser: name }, quiet);
      const p = roundTrip(codec, { content: 'Checking first.', tool_calls: [wire('execute_bash', { command: 'ls' }, 0)] });
      expect(p.content.trim()).toBe('Checking first.');
      expect(p.toolCalls).toEqual([{ name: 'execute_bash', arguments: { command: 'ls' } }]);
    });
  }
});

describe('re-tokenized reply with a call whose arguments are not a JSON object', () => {
  const bad = (args: string, i: number) => ({ id: `call_${i}`, type: 'function', function: { name: 'execute_bash', arguments: args } });
  const cases = [...FAMS.filter((f) => f !== GPT_OSS).map((f) => [f.name, () => codecOf(f)] as const), ...TOOL_PARSER_NAMES.filter((n) => n !== 'openai').map((n) => [`qwen3 vocabulary, ${n}`, () => codecFor({ toolParser: n }, quiet)] as const)];
  it.each(cases)('%s: keeps the text and the good call, and the policy is told the other was malformed', (_name, make) => {
    const codec = make();
    const p = roundTrip(codec, { content: 'Trying two.', tool_calls: [wire('read', { path: 'a.txt' }, 0), bad('{cmd: ls}', 1), bad('[1, 2]', 2)] });
    expect(p.content.trim()).toBe('Trying two.');
    expect(p.toolCalls).toEqual([{ name: 'read', arguments: { path: 'a.txt' } }]);
    expect(p.malformed).toHaveLength(2);
  });
});

describe('re-tokenized reply with reasoning (reasoning_content)', () => {
  it('keeps the reasoning, the text and the call (Qwen3, whose template drops the think block of a historical turn)', () => {
    const codec = codecOf(FAMILIES.qwen3);
    const p = roundTrip(codec, { reasoning_content: 'I should run ls.', content: 'Listing.', tool_calls: [wire('execute_bash', { command: 'ls' }, 0)] });
    expect(p.reasoning).toBe('I should run ls.');
    expect(p.toolCalls).toEqual([{ name: 'execute_bash', arguments: { command: 'ls' } }]);
    expect(p.content).toContain('Listing.');
    const plain = roundTrip(codec, { reasoning_content: 'Nothing to do.', content: 'Done.' }, 'stop');
    expect(plain.reasoning).toBe('Nothing to do.');
  });

  it('keeps gpt-oss reasoning in its own channel', () => {
    const codec = codecOf(GPT_OSS);
    const p = roundTrip(codec, { reasoning_content: 'I should run ls.', content: 'Listing.', tool_calls: [wire('execute_bash', { command: 'ls' }, 0)] });
    expect(p.reasoning).toContain('I should run ls.');
    expect(p.toolCalls).toEqual([{ name: 'execute_bash', arguments: { command: 'ls' } }]);
  });
});

describe('encodeAssistant writes what the template would lose, and only that', () => {
  it('renders a turn its template keeps through the template (Qwen3: unchanged ids)', () => {
    const codec = codecOf(FAMILIES.qwen3);
    const turn = { content: 'Looking.', tool_calls: [{ name: 'bash', arguments: { cmd: 'ls' } }] };
    expect(codec.decode(codec.encodeAssistant(turn))).toBe('Looking.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call><|im_end|>');
  });

  it('writes the calls of a DeepSeek-V3 turn with text in its own format, after the text', () => {
    const codec = codecOf(FAMILIES.deepseek_v3);
    const text = codec.decode(codec.encodeAssistant({ content: 'Looking.', tool_calls: [{ name: 'bash', arguments: { cmd: 'ls' } }] }));
    expect(text).toBe('Looking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>bash\n```json\n{"cmd":"ls"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>');
  });

  it('writes a Llama 3.1 turn with text as the text, then the calls behind <|python_tag|>; a calls-only turn as the template does', () => {
    const codec = codecOf(FAMILIES.llama3_1);
    expect(codec.decode(codec.encodeAssistant({ content: 'Looking.', tool_calls: [{ name: 'bash', arguments: { cmd: 'ls' } }] }))).toBe('Looking.<|python_tag|>{"name": "bash", "parameters": {"cmd": "ls"}}<|eot_id|>');
    expect(codec.decode(codec.encodeAssistant({ tool_calls: [{ name: 'bash', arguments: { cmd: 'ls' } }] }))).toBe('{"name": "bash", "parameters": {"cmd": "ls"}}<|eot_id|>');
  });
});
