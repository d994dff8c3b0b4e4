import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ValidationError } from '../../../src/errors.js';
import { codecFor } from '../../../src/llm/codec-registry.js';
import { createHarmonyCodec, isHarmonyVocab } from '../../../src/llm/harmony-codec.js';
import { loadTokenizer } from '../../../src/llm/hf-codec.js';
import { chatCompletion, renderChatPrompt } from '../../../src/llm/openai-chat-route.js';
import { retokenize } from '../../../src/llm/protocols/openai.js';
import { createTextParser } from '../../../src/llm/tool-parsers/index.js';
import type { Message, ToolSchema } from '../../../src/protocol/messages.js';
import { FAMILIES, GPT_OSS } from '../../fixtures/model-families.js';

const tokenizerJson = JSON.parse(readFileSync(join(GPT_OSS.dir, 'tokenizer.json'), 'utf8')) as object;
const tok = loadTokenizer(tokenizerJson, JSON.parse(readFileSync(join(GPT_OSS.dir, 'tokenizer_config.json'), 'utf8')) as object);
const codec = createHarmonyCodec(tok, { currentDate: '2025-06-28', reasoningEffort: 'high' });

const fn = (name: string, description: string, parameters: Record<string, unknown>): ToolSchema => ({ type: 'function', function: { name, description, parameters } });
const format = { type: 'string', enum: ['celsius', 'fahrenheit'], default: 'celsius' };
// The three functions of the harmony guide's example.
const WEATHER_TOOLS = [
  fn('get_location', 'Gets the location of the user.', {}),
  fn('get_current_weather', 'Gets the current weather in the provided location.', { type: 'object', properties: { location: { type: 'string', description: 'The city and state, e.g. San Francisco, CA' }, format }, required: ['location'] }),
  fn('get_multiple_weathers', 'Gets the current weather in the provided list of locations.', {
    type: 'object',
    properties: { locations: { type: 'array', description: 'List of city and state, e.g. ["San Francisco, CA", "New York, NY"]', items: { type: 'string' } }, format },
    required: ['locations'],
  }),
];

// The harmony guide's prompt with these tools, byte for byte (its "complete input example").
const GUIDE_PROMPT = [
  '<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2025-06-28\n\nReasoning: high\n\n',
  "# Valid channels: analysis, commentary, final. Channel must be included for every message.\nCalls to these tools must go to the commentary channel: 'functions'.<|end|>",
  '<|start|>developer<|message|># Instructions\n\nUse a friendly tone.\n\n# Tools\n\n## functions\n\nnamespace functions {\n\n',
  '// Gets the location of the user.\ntype get_location = () => any;\n\n',
  '// Gets the current weather in the provided location.\ntype get_current_weather = (_: {\n// The city and state, e.g. San Francisco, CA\nlocation: string,\nformat?: "celsius" | "fahrenheit", // default: celsius\n}) => any;\n\n',
  '// Gets the current weather in the provided list of locations.\ntype get_multiple_weathers = (_: {\n// List of city and state, e.g. ["San Francisco, CA", "New York, NY"]\nlocations: string[],\nformat?: "celsius" | "fahrenheit", // default: celsius\n}) => any;\n\n',
  '} // namespace functions<|end|><|start|>user<|message|>What is the weather like in SF?<|end|><|start|>assistant',
].join('');

const GUIDE_CHAT: Message[] = [
  { role: 'system', content: 'Use a friendly tone.' },
  { role: 'user', content: 'What is the weather like in SF?' },
];

describe('harmony codec (gpt-oss)', () => {
  it('is picked for a directory with the harmony vocabulary, which needs no chat template', () => {
    expect(isHarmonyVocab(tokenizerJson)).toBe(true);
    const c = codecFor({ tokenizer: GPT_OSS.dir });
    expect(c.format.toolParser).toBe('openai');
    expect(c.decode(c.encodePrompt([{ role: 'user', content: 'hi' }], []))).toMatch(/^<\|start\|>system<\|message\|>You are ChatGPT.*\nCurrent date: \d{4}-\d\d-\d\d\n\nReasoning: medium\n\n# Valid channels: analysis, final\. Channel must be included for every message\.<\|end\|><\|start\|>user<\|message\|>hi<\|end\|><\|start\|>assistant$/s);
  });

  it('renders the harmony guide’s prompt with its three functions exactly', () => {
    expect(codec.renderText(GUIDE_CHAT, WEATHER_TOOLS, { addGenerationPrompt: true })).toBe(GUIDE_PROMPT);
    expect(codec.encodePrompt(GUIDE_CHAT, WEATHER_TOOLS)).toEqual(tok.encode(GUIDE_PROMPT));
  });

  it('writes the format’s special tokens as the single ids of the guide, and stops generating at <|call|> and <|return|>, not at <|end|>', () => {
    const ids = codec.encode('<|start|><|end|><|message|><|channel|><|constrain|><|return|><|call|>');
    expect(ids).toEqual([200006, 200007, 200008, 200005, 200003, 200002, 200012]);
    expect(codec.stopIds.has(200012)).toBe(true);
    expect(codec.stopIds.has(200002)).toBe(true);
    expect(codec.stopIds.has(200007)).toBe(false);
    expect(codec.endOfTurnId).toBe(200002);
  });

  it('reads the guide’s sampled ids: the analysis channel is the reasoning, the final channel the content', () => {
    // The token ids of the guide's StreamableParser example.
    const ids = [200005, 35644, 200008, 1844, 31064, 25, 392, 4827, 382, 220, 17, 659, 220, 17, 16842, 12295, 81645, 13, 51441, 6052, 13, 200007, 200006, 173781, 200005, 17196, 200008, 17, 659, 220, 17, 314, 220, 19, 13, 200002];
    expect(codec.parseAssistant(ids)).toEqual({ content: '2 + 2 = 4.', toolCalls: [], malformed: [], reasoning: 'User asks: "What is 2 + 2?" Simple arithmetic. Provide answer.' });
  });

  it('reads a tool call with its recipient in the channel part or the role part, and a preamble', () => {
    const a = codec.parseAssistant(codec.encode('<|channel|>analysis<|message|>Need to use function get_weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"location":"San Francisco"}<|call|>'));
    expect(a).toEqual({ content: '', toolCalls: [{ name: 'get_weather', arguments: { location: 'San Francisco' } }], malformed: [], reasoning: 'Need to use function get_weather.' });
    const b = codec.parseAssistant(codec.encode(' to=functions.bash<|channel|>commentary json<|message|>{"cmd": "ls"}<|call|>'));
    expect(b.toolCalls).toEqual([{ name: 'bash', arguments: { cmd: 'ls' } }]);
    const c = codec.parseAssistant(codec.encode('<|channel|>commentary<|message|>**Plan**: write the file.<|end|><|start|>assistant<|channel|>commentary to=functions.generate_file<|constrain|>json<|message|>{"path": "index.html"}<|call|>'));
    expect(c).toMatchObject({ content: '**Plan**: write the file.', toolCalls: [{ name: 'generate_file', arguments: { path: 'index.html' } }] });
  });

  it('reports a broken call as the policy’s malformed call, and keeps text outside the format', () => {
    const bad = codec.parseAssistant(codec.encode('<|channel|>commentary to=functions.bash <|constrain|>json<|message|>{"cmd": "ls"<|call|>'));
    expect(bad.toolCalls).toEqual([]);
    expect(bad.malformed).toEqual([{ raw: '{"cmd": "ls"', error: expect.stringMatching(/^invalid JSON/) }]);
    expect(codec.parseAssistant(codec.encode('<|channel|>commentary to=functions.bash<|message|>[1, 2]<|call|>')).malformed[0]!.error).toBe('"arguments" is not a JSON object');
    expect(codec.parseAssistant(codec.encode('<|channel|>analysis to=python<|message|>print(1)<|call|>')).malformed[0]!.error).toMatch(/tool call to "python": only the functions namespace/);
    expect(codec.parseAssistant(codec.encode('just some words')).content).toBe('just some words');
    // A completion that opens with its own <|start|>assistant reads as if it had not.
    expect(codec.parseAssistant(codec.encode('<|start|>assistant<|channel|>final<|message|>Hi.<|return|>'))).toEqual({ content: 'Hi.', toolCalls: [], malformed: [] });
  });

  it('appends a tool result and the next generation prompt exactly as the guide renders the whole conversation', () => {
    const prompt = codec.encodePrompt(GUIDE_CHAT, WEATHER_TOOLS);
    const sampled = codec.encode('<|channel|>analysis<|message|>Need to use function get_weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"location":"San Francisco"}<|call|>');
    // No name on the tool message: it answers the turn's last call.
    const more = codec.encodeContinuation([{ role: 'tool', content: '{"sunny": true, "temperature": 20}' }], sampled);
    const guide = GUIDE_PROMPT + codec.decode(sampled) + '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{"sunny": true, "temperature": 20}<|end|><|start|>assistant';
    expect([...prompt, ...sampled, ...more]).toEqual(tok.encode(guide));
    expect(codec.decode(codec.encodeContinuation([{ role: 'tool', content: 'ok', name: 'bash' }, { role: 'user', content: 'go on' }], sampled))).toBe(
      '<|start|>functions.bash to=assistant<|channel|>commentary<|message|>ok<|end|><|start|>user<|message|>go on<|end|><|start|>assistant',
    );
  });

  it('closes a turn cut by max_tokens with <|end|> before what follows', () => {
    const cut = codec.encode('<|channel|>analysis<|message|>Thinking about');
    expect(codec.decode(codec.encodeContinuation([{ role: 'user', content: 'hurry' }], cut))).toBe('<|end|><|start|>user<|message|>hurry<|end|><|start|>assistant');
  });

  it('renders a scripted turn as gpt-oss writes one, and reads it back', () => {
    const call = { name: 'bash', arguments: { command: 'ls -la' } };
    const ids = codec.encodeAssistant({ reasoning: 'List first.', content: 'Looking.', tool_calls: [call] });
    expect(codec.decode(ids)).toBe('<|channel|>analysis<|message|>List first.<|end|><|start|>assistant<|channel|>commentary<|message|>Looking.<|end|><|start|>assistant<|channel|>commentary to=functions.bash <|constrain|>json<|message|>{"command":"ls -la"}<|call|>');
    expect(codec.parseAssistant(ids)).toEqual({ content: 'Looking.', toolCalls: [call], malformed: [], reasoning: 'List first.' });
    expect(codec.decode(codec.encodeAssistant({ content: 'Done.' }))).toBe('<|channel|>final<|message|>Done.<|return|>');
    expect(codec.stopIds.has(ids.at(-1)!)).toBe(true);
  });

  it('re-renders a conversation as vLLM renders chat history, so drift shows where that differs from the sampled ids', () => {
    const sampledCall = codec.encodeAssistant({ reasoning: 'Use bash.', tool_calls: [{ name: 'bash', arguments: { cmd: 'ls' } }] });
    const first = codec.parseAssistant(sampledCall);
    const turn: Message = { role: 'assistant', content: first.content, tool_calls: first.toolCalls, token_ids: sampledCall };
    const chat: Message[] = [...GUIDE_CHAT, turn, { role: 'tool', content: 'a.txt', name: 'bash' }];
    const incremental = [...codec.encodePrompt(GUIDE_CHAT, WEATHER_TOOLS), ...sampledCall, ...codec.encodeContinuation(chat.slice(3), sampledCall)];
    const full = codec.renderFull!(chat, WEATHER_TOOLS);
    // History puts the recipient in the role part and the content type as plain `json`.
    expect(codec.decode(full)).toBe(
      `${GUIDE_PROMPT}<|channel|>analysis<|message|>Use bash.<|end|><|start|>assistant to=functions.bash<|channel|>commentary json<|message|>{"cmd":"ls"}<|call|><|start|>functions.bash to=assistant<|channel|>commentary<|message|>a.txt<|end|><|start|>assistant`,
    );
    expect(full).not.toEqual(incremental);
    const prefix = codec.encodePrompt(GUIDE_CHAT, WEATHER_TOOLS).length;
    expect(full.slice(0, prefix)).toEqual(incremental.slice(0, prefix));
    // A turn sampled in history's own form is spliced as sampled: no drift.
    const historyForm = codec.encode(' to=functions.bash<|channel|>commentary json<|message|>{"cmd":"ls"}<|call|>');
    const same: Message = { role: 'assistant', content: '', tool_calls: [{ name: 'bash', arguments: { cmd: 'ls' } }], token_ids: historyForm };
    const chat2: Message[] = [...GUIDE_CHAT, same, { role: 'tool', content: 'a.txt', name: 'bash' }];
    expect(codec.renderFull!(chat2, WEATHER_TOOLS)).toEqual([...codec.encodePrompt(GUIDE_CHAT, WEATHER_TOOLS), ...historyForm, ...codec.encodeContinuation(chat2.slice(3), historyForm)]);
  });

  it('renders chat history from messages as vLLM does: a call’s content as a commentary preamble, a tool result by its call’s id', () => {
    const chat: Message[] = [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: 'Checking.', tool_calls: [{ id: 'c1', name: 'bash', arguments: { cmd: 'ls' } }] },
      { role: 'tool', content: 'a.txt', tool_call_id: 'c1' },
      { role: 'assistant', content: 'There is a.txt.' },
    ];
    expect(codec.renderText(chat, [], { addGenerationPrompt: false }).split('<|end|>').slice(1).join('<|end|>')).toBe(
      '<|start|>user<|message|>hi<|end|><|start|>assistant<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant to=functions.bash<|channel|>commentary json<|message|>{"cmd":"ls"}<|call|><|start|>functions.bash to=assistant<|channel|>commentary<|message|>a.txt<|end|><|start|>assistant<|channel|>final<|message|>There is a.txt.<|end|>',
    );
  });

  it('shows nested, nullable, union and documented parameters by the harmony library’s rules', () => {
    const t = fn('deploy', 'Deploys.\nCarefully.', {
      type: 'object',
      properties: {
        env: { type: 'string', title: 'Environment', enum: ['dev', 'prod'], default: 'dev' },
        replicas: { type: 'integer', default: 2, examples: ['3'] },
        tag: { type: 'string', nullable: true, default: 'latest' },
        ids: { type: ['number', 'string'] },
        opts: { type: 'object', properties: { force: { type: 'boolean', description: 'Skip checks.' } }, required: ['force'] },
        target: { description: 'Where to.', oneOf: [{ type: 'string', description: 'A host.' }, { type: 'number', description: 'A port.', default: 80 }] },
        list: { type: 'array' },
      },
      required: ['env'],
    });
    expect(codec.renderText([{ role: 'user', content: 'x' }], [t], { addGenerationPrompt: false })).toContain(
      [
        '// Deploys.\n// Carefully.\ntype deploy = (_: {\n',
        '// Environment\n//\nenv: "dev" | "prod", // default: dev\n',
        '// Examples:\n// - "3"\nreplicas?: number, // default: 2\n',
        'tag?: string | null, // default: "latest"\n',
        'ids?: number | string,\n',
        'opts?: {\n    // Skip checks.\n    force: boolean,\n    },\n',
        '// Where to.\ntarget?:\n | string\n | number // A port. default: 80\n,\n',
        'list?: Array<any>,\n',
        '}) => any;',
      ].join(''),
    );
  });

  it('refuses another tool parser for a harmony vocabulary, and the openai parser for any other', () => {
    expect(() => codecFor({ tokenizer: GPT_OSS.dir, toolParser: 'hermes' })).toThrow(ValidationError);
    expect(() => codecFor({ tokenizer: GPT_OSS.dir, toolParser: 'hermes' })).toThrow(/harmony \(gpt-oss\) vocabulary: its tool calls are read by the openai tool parser, not hermes/);
    expect(() => codecFor({ tokenizer: FAMILIES.llama3_1.dir, toolParser: 'openai' })).toThrow(/the openai tool parser reads harmony/);
    expect(codecFor({ tokenizer: GPT_OSS.dir, toolParser: 'openai' }).format.toolParser).toBe('openai');
  });

  it('answers an OpenAI chat request with the reasoning in reasoning_content, as vLLM does for gpt-oss', () => {
    const outputIds = codec.encodeAssistant({ reasoning: 'Use bash.', tool_calls: [{ name: 'bash', arguments: { cmd: 'ls' } }] });
    const res = chatCompletion(codec, { model: 'm', messages: [] } as never, { promptIds: [1], outputIds, logprobs: outputIds.map(() => 0), finishReason: 'stop' }, { model: 'm', n: 0, returnTokenIds: false }) as { choices: { message: Record<string, unknown>; finish_reason: string }[] };
    expect(res.choices[0]).toMatchObject({ finish_reason: 'tool_calls', message: { content: null, reasoning_content: 'Use bash.', tool_calls: [{ type: 'function', function: { name: 'bash', arguments: '{"cmd":"ls"}' } }] } });
  });

  it('re-tokenizes an OpenAI server’s reply (text, reasoning_content, tool_calls) into harmony channels, not a <think> block', () => {
    const ids = retokenize(codec, { role: 'assistant', content: null, reasoning_content: 'Use bash.', tool_calls: [{ id: 'x', type: 'function', function: { name: 'bash', arguments: '{"cmd":"ls"}' } }] } as never, false);
    expect(codec.decode(ids)).toBe('<|channel|>analysis<|message|>Use bash.<|end|><|start|>assistant<|channel|>commentary to=functions.bash <|constrain|>json<|message|>{"cmd":"ls"}<|call|>');
  });

  it('makes the same model’s codec at another reasoning effort, one per effort, under the same name', () => {
    const high = codec.withReasoningEffort!('high');
    const low = codec.withReasoningEffort!('low');
    expect(high).toBe(codec);
    expect(low.name).toBe(codec.name);
    expect(low.withReasoningEffort!('low')).toBe(low);
    expect(low.withReasoningEffort!('high')).toBe(codec);
    expect(low.renderText(GUIDE_CHAT, WEATHER_TOOLS, { addGenerationPrompt: true })).toBe(GUIDE_PROMPT.replace('Reasoning: high', 'Reasoning: low'));
    // An OpenAI chat request's reasoning_effort, as vLLM reads it.
    expect(codec.decode(renderChatPrompt(codec, { messages: [{ role: 'user', content: 'hi' }], reasoning_effort: 'low' } as never))).toContain('Reasoning: low');
  });

  it('gives OpenAI servers the reasoning apart (--tool-parser openai)', () => {
    const p = createTextParser('openai', null).parse('<|channel|>analysis<|message|>hmm<|end|><|start|>assistant<|channel|>final<|message|>yes<|return|>');
    expect(p).toEqual({ content: 'yes', toolCalls: [], reasoning: 'hmm', malformed: [] });
  });
});
