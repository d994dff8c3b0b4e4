import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentHandler } from '../../../src/proxy/agent-contract.js';
import { codecFor } from '../../../src/llm/codec-registry.js';
import type { HfChatCodec } from '../../../src/llm/hf-codec.js';
import type { Engine } from '../../../src/llm/llm-http-server.js';
import type { Instance } from '../../../src/protocol/instance.js';
import type { Message, ToolSchema } from '../../../src/protocol/messages.js';
import type { RolloutResult } from '../../../src/protocol/trajectory.js';
import { createRuntime } from '../../../src/runtime/runtime.js';
import { scriptedEngine } from '../../../src/testing/fake-llm-policies.js';
import { startFakeLlmServer } from '../../../src/testing/fake-llm-server.js';
import { FAMILIES, GPT_OSS, type Family } from '../../fixtures/model-families.js';

// Re-tokenized mode end to end, per model family: a stock OpenAI chat server (fake-llm's chat
// route with token ids off, rendering and parsing with the family's codec) answers text plus a
// tool call; the runtime re-tokenizes each reply with the same codec. The reply's text and calls
// must survive (#28: DeepSeek-V3 lost the call — reward 0 where other families got 1 — and
// Llama 3.1 the text), and drift must be reported exactly where the prompt the server rendered
// does not extend the trajectory's (the server records the prompt ids it rendered).

const TOOLS: ToolSchema[] = [
  { type: 'function', function: { name: 'execute_bash', description: 'Run a shell command.', parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] } } },
  { type: 'function', function: { name: 'finish', description: 'End the task.', parameters: { type: 'object', properties: { message: { type: 'string' } } } } },
];
const ORACLE = [
  { content: 'Let me list the files first.', tool_calls: [{ name: 'execute_bash', arguments: { command: 'ls' } }] },
  { content: 'Two files. Finishing now.', tool_calls: [{ name: 'finish', arguments: { message: 'done' } }] },
];

/** Runs each call; reward 1 when the policy called finish. Gemma 3's template has no tool role: tool output goes back as a user turn. */
const agentFor = (f: Family): AgentHandler => ({
  name: 'fam',
  async init() {
    return { messages: [{ role: 'system', content: 'You act with tools.' }, { role: 'user', content: 'List the files, then finish.' }], tools: TOOLS };
  },
  async act(ctx) {
    const calls = ctx.assistant.tool_calls;
    if (calls.some((c) => c.name === 'finish')) return { messages: [], observations: [], stop: 'finish_tool' };
    if (calls.length === 0) return { messages: [], observations: [], stop: 'no_tool_call' };
    const messages: Message[] = calls.map((c, i) => (f.name === 'gemma3' ? { role: 'user', content: 'Output: a.txt b.txt' } : { role: 'tool', content: 'a.txt b.txt', name: c.name, tool_call_id: c.id ?? `call_${ctx.turn}_${i}` }));
    return { messages, observations: [], stop: null };
  },
  async eval(ctx) {
    return { reward: ctx.finish === 'finish_tool' ? 1 : 0, resolved: ctx.finish === 'finish_tool' };
  },
});

const FAMS = [...Object.values(FAMILIES), GPT_OSS];

describe('re-tokenized rollouts per family (OpenAI server without token ids)', () => {
  const results = new Map<string, { r: RolloutResult; served: number[][]; codec: HfChatCodec }>();

  beforeAll(async () => {
    for (const f of FAMS) {
      const codec = codecFor(f.name === 'qwen3' ? {} : { tokenizer: f.dir }, { onWarning: () => undefined });
      const inst: Instance = { data_source: 'fam', instance_id: `rt-${f.name}`, oracle: ORACLE };
      const inner = scriptedEngine(codec, new Map([[inst.instance_id as string, inst]]));
      const served: number[][] = [];
      // What the server rendered from the messages it was sent: its real prompt, turn by turn.
      const engine: Engine = { decode: inner.decode, generate: (req) => (served.push(req.promptIds), inner.generate(req)) };
      const fake = await startFakeLlmServer({ protocol: 'openai', openaiTokenIds: false, policy: engine, codec });
      const rt = createRuntime({ backends: [`openai+${fake.url}/v1`], codec, handlers: [agentFor(f)], sandboxDriver: 'none', retries: { max: 0, backoffMs: 0, backoffMaxMs: 0 } });
      try {
        const r = await rt.submit(inst, { max_iterations: 4, max_output_tokens: 256 }).result;
        results.set(f.name, { r, served, codec });
      } finally {
        await rt.close();
        await fake.close();
      }
    }
  }, 240_000);

  afterAll(() => results.clear());

  describe.each(FAMS.map((f) => [f.name] as const))('%s', (name) => {
    it('keeps every reply’s text and tool call, so the policy’s finish call is seen (reward 1)', () => {
      const { r } = results.get(name)!;
      expect(r.error ?? null).toBeNull();
      expect(r.trajectory.tokenSource).toBe('retokenized');
      expect(r.finish).toBe('finish_tool');
      expect(r.reward).toBe(1);
      const assistants = r.trajectory.messages.filter((m) => m.role === 'assistant');
      expect(assistants.map((m) => (m.content ?? '').trim())).toEqual(ORACLE.map((o) => o.content));
      expect(assistants.map((m) => m.tool_calls?.map((c) => ({ name: c.name, arguments: c.arguments })))).toEqual(ORACLE.map((o) => o.tool_calls));
    });

    it('reports drift exactly where the prompt the server rendered leaves the trajectory’s', () => {
      const { r, served } = results.get(name)!;
      const turns = r.trajectory.turns;
      expect(served).toHaveLength(turns.length);
      const expected = [];
      for (let k = 1; k < turns.length; k++) {
        const ours = turns[k]!.promptIds;
        const theirs = served[k]!;
        let i = 0;
        while (i < ours.length && i < theirs.length && ours[i] === theirs[i]) i++;
        if (i < ours.length || i < theirs.length) expected.push({ turn: k, position: i, expected: theirs[i] ?? null, actual: ours[i] ?? null });
      }
      expect(r.trajectory.diagnostics.drift).toEqual(expected);
    });
  });

  it('finds drift where the templates rewrite history (Llama 3.1, DeepSeek-V3, Gemma 3, gpt-oss) and none for Qwen3', () => {
    const drifted = FAMS.filter((f) => results.get(f.name)!.r.trajectory.diagnostics.drift.length > 0).map((f) => f.name);
    expect(drifted.sort()).toEqual(['deepseek_v3', 'gemma3', 'gpt_oss', 'llama3_1']);
  });
});
