import Anthropic from '@anthropic-ai/sdk';
import { GoogleGenAI, type Content } from '@google/genai';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { AgentHandler, ExternalAgent, ExternalAgentEvent } from '../../../src/proxy/agent-contract.js';
import type { LlmClient } from '../../../src/llm/llm-client.js';
import { OracleBackend } from '../../../src/llm/oracle-backend.js';
import { LlmProxy } from '../../../src/proxy/llm-proxy.js';
import { createRuntime, type EmbeddedRuntime } from '../../../src/runtime/runtime.js';
import { MemorySandboxProvider } from '../../../src/testing/memory-sandbox.js';
import { TestCodec } from '../../../src/testing/test-codec.js';
import { forwardTcp } from './tcp-forward.js';

/**
 * Whole rollouts whose agent speaks each dialect through the official SDK, streaming: the agent
 * asks, runs the model's `bash` calls (answering "ran <command>"), sends the results back in its
 * dialect and stops at an answer without calls. Underneath it is the one token path — rollout
 * loop, oracle backend, token record — so each dialect must give the same token-exact trajectory.
 */
type Dialect = 'chat' | 'responses' | 'anthropic' | 'google';
const TASK = 'Print one, then two.';
const SYSTEM = 'You are a shell agent.';
const bashSchema = { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] };

/** One agent loop per dialect: calls the model until an answer has no tool calls; returns the answers' texts. */
const loops: Record<Dialect, (base: string, key: string) => Promise<string[]>> = {
  async chat(base, key) {
    const client = new OpenAI({ apiKey: key, baseURL: `${base}/v1`, maxRetries: 0 });
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'system', content: SYSTEM }, { role: 'user', content: TASK }];
    const texts: string[] = [];
    for (;;) {
      const done = await client.chat.completions.stream({ model: 'qwen3-coder', messages, tools: [{ type: 'function', function: { name: 'bash', parameters: bashSchema } }], stream_options: { include_usage: true } }).finalChatCompletion();
      const m = done.choices[0]!.message;
      texts.push(m.content ?? '');
      messages.push({ role: 'assistant', content: m.content, ...(m.tool_calls?.length ? { tool_calls: m.tool_calls } : {}) });
      if (!m.tool_calls?.length) return texts;
      for (const c of m.tool_calls) if (c.type === 'function') messages.push({ role: 'tool', tool_call_id: c.id, content: `ran ${(JSON.parse(c.function.arguments) as { command: string }).command}` });
    }
  },
  async responses(base, key) {
    const client = new OpenAI({ apiKey: key, baseURL: `${base}/v1`, maxRetries: 0 });
    const input: OpenAI.Responses.ResponseInputItem[] = [{ role: 'user', content: TASK }];
    const texts: string[] = [];
    for (;;) {
      const r = await client.responses.stream({ model: 'gpt-5-codex', instructions: SYSTEM, input, tools: [{ type: 'function', name: 'bash', parameters: bashSchema, strict: false }], store: false }).finalResponse();
      texts.push(r.output_text);
      input.push(...(r.output as OpenAI.Responses.ResponseInputItem[]));
      const calls = r.output.filter((o) => o.type === 'function_call');
      if (calls.length === 0) return texts;
      for (const c of calls) input.push({ type: 'function_call_output', call_id: c.call_id, output: `ran ${(JSON.parse(c.arguments) as { command: string }).command}` });
    }
  },
  async anthropic(base, key) {
    const client = new Anthropic({ apiKey: key, baseURL: base, maxRetries: 0 });
    const messages: Anthropic.MessageParam[] = [{ role: 'user', content: TASK }];
    const texts: string[] = [];
    for (;;) {
      const m = await client.messages.stream({ model: 'claude-sonnet-4-5', max_tokens: 1024, system: SYSTEM, messages, tools: [{ name: 'bash', input_schema: bashSchema as Anthropic.Tool.InputSchema }] }).finalMessage();
      texts.push(m.content.map((b) => (b.type === 'text' ? b.text : '')).join(''));
      messages.push({ role: 'assistant', content: m.content });
      const calls = m.content.filter((b) => b.type === 'tool_use');
      if (calls.length === 0) return texts;
      messages.push({ role: 'user', content: calls.map((c) => ({ type: 'tool_result' as const, tool_use_id: c.id, content: `ran ${(c.input as { command: string }).command}` })) });
    }
  },
  async google(base, key) {
    const client = new GoogleGenAI({ apiKey: key, httpOptions: { baseUrl: base } });
    const contents: Content[] = [{ role: 'user', parts: [{ text: TASK }] }];
    const texts: string[] = [];
    for (;;) {
      let last: Content | undefined;
      const parts: NonNullable<Content['parts']> = [];
      for await (const chunk of await client.models.generateContentStream({ model: 'gemini-2.5-pro', contents, config: { systemInstruction: SYSTEM, tools: [{ functionDeclarations: [{ name: 'bash', parametersJsonSchema: bashSchema }] }] } })) {
        last = chunk.candidates?.[0]?.content;
        parts.push(...(last?.parts ?? []));
      }
      texts.push(parts.map((p) => p.text ?? '').join(''));
      contents.push({ role: 'model', parts });
      const calls = parts.filter((p) => p.functionCall).map((p) => p.functionCall!);
      if (calls.length === 0 || !last) return texts;
      contents.push({ role: 'user', parts: calls.map((c) => ({ functionResponse: { id: c.id, name: c.name!, response: { output: `ran ${(c.args as { command: string }).command}` } } })) });
    }
  },
};

/**
 * The Gemini agent with a side request in parallel with its first call, as CLIs ask for a session
 * title: @google/genai does not retry, and the Gemini CLI retries only 429 and 5xx, so the proxy
 * must serve both rather than refuse one.
 */
async function googleWithSideRequest(base: string, key: string): Promise<string[]> {
  const side = new GoogleGenAI({ apiKey: key, httpOptions: { baseUrl: base } }).models.generateContent({ model: 'gemini-2.5-flash', contents: [{ role: 'user', parts: [{ text: `A title for: ${TASK}` }] }] });
  const [texts, title] = await Promise.all([loops.google(base, key), side]);
  return [...texts, `title call: ${title.functionCalls?.[0]?.name ?? title.text}`];
}

/** The agent as the runtime sees it: the SDK loop in this process behind the rollout's proxy. */
class SdkAgent implements ExternalAgent {
  readonly limits = {};
  texts: string[] = [];
  private readonly exited: Promise<number>;
  constructor(
    private readonly proxy: LlmProxy,
    run: Promise<string[]>,
  ) {
    this.exited = run.then(
      (t) => {
        this.texts = t;
        return 0;
      },
      () => 1,
    );
  }
  async next(signal: AbortSignal): Promise<ExternalAgentEvent> {
    const local = new AbortController();
    const call = this.proxy.next(AbortSignal.any([signal, local.signal])).then((c): ExternalAgentEvent => ({ type: 'chat', call: c }));
    call.catch(() => undefined);
    try {
      return await Promise.race([call, this.exited.then((c): ExternalAgentEvent => ({ type: 'exit', exitCode: c }))]);
    } finally {
      local.abort();
    }
  }
  async stop(reason: string): Promise<void> {
    this.proxy.end(reason);
    await this.exited;
  }
}

const cleanups: Promise<void>[] = [];
/** Each rollout's proxy, for the backend below. */
const proxies = new Map<string, LlmProxy>();
const handler: AgentHandler = {
  name: 'sdk-agent',
  async init(ctx) {
    const dir = await mkdtemp(join(tmpdir(), 'sdk-agent-'));
    const key = `rk-${randomBytes(8).toString('hex')}`;
    const proxy = await LlmProxy.listen({ socketPath: join(dir, 'llm.sock'), token: key });
    proxies.set(ctx.rolloutId, proxy);
    const fwd = await forwardTcp(proxy.socketPath);
    const name = ctx.instance.dialect as string;
    const agent = new SdkAgent(proxy, name === 'google+side' ? googleWithSideRequest(fwd.url, key) : loops[name as Dialect](fwd.url, key));
    ctx.signal.addEventListener('abort', () => cleanups.push((async () => {
      await agent.stop('ended');
      await fwd.close();
      await proxy.close();
      await rm(dir, { recursive: true, force: true });
    })()), { once: true });
    return { messages: [], tools: [], external: agent, state: { agent } };
  },
  act: () => Promise.reject(new Error('not called')),
  async eval(ctx) {
    const { agent } = ctx.state as { agent: SdkAgent };
    await agent.stop('evaluating');
    return { reward: 1, resolved: true, details: { texts: agent.texts } };
  },
};

const codec = new TestCodec();
let runtime: EmbeddedRuntime;
beforeAll(() => {
  const oracle = new OracleBackend({ codec });
  // The side-request rollout's first call is sampled only once both of its requests reached the
  // proxy, so the second one surely arrives while the first is unanswered.
  const llm: LlmClient = {
    async generate(req) {
      const proxy = proxies.get(req.rolloutId);
      if (req.instance.dialect === 'google+side' && req.turn === 0 && proxy) await vi.waitFor(() => expect(proxy.stats.requests).toBeGreaterThanOrEqual(2), { timeout: 10_000 });
      return oracle.generate(req);
    },
  };
  runtime = createRuntime({ codec, llm, sandboxes: new MemorySandboxProvider(), handlers: [handler], retries: { max: 0 }, budgetMs: 20_000 });
});
afterAll(async () => {
  await runtime.close();
  await Promise.all(cleanups);
});

const bash = (command: string) => ({ tool_calls: [{ name: 'bash', arguments: { command } }] });

describe('a rollout whose agent speaks a dialect through its official SDK', () => {
  it.each(['chat', 'responses', 'anthropic', 'google'] as const)('%s: the same token-exact trajectory, one sequence of three calls', async (dialect) => {
    const r = await runtime.submit({ data_source: 'sdk-agent', instance_id: `sdk-${dialect}`, dialect, oracle: [bash('echo one'), bash('echo two'), { content: 'All done.' }] }).result;
    expect([r.outcome, r.finish], JSON.stringify(r.error)).toEqual(['completed', 'no_tool_call']);
    expect(r.evalDetails?.texts).toEqual(['', '', 'All done.']);
    const t = r.trajectory;
    expect(t.turns).toHaveLength(3);
    expect(t.segments).toBeUndefined();
    expect(t.diagnostics.continuity).toBe('token-exact');
    expect(t.diagnostics.merge).toEqual({ calls: 3, sequences: 1, callsPerSequence: [3] });
    expect(t.messages.filter((m) => m.role === 'tool').map((m) => m.content)).toEqual(['ran echo one', 'ran echo two']);
    expect(t.messages[0]).toEqual(expect.objectContaining({ role: 'system', content: SYSTEM }));
    // Every sampled token is in the record with its logprob and mask 1; the rest is mask 0.
    for (const turn of t.turns) {
      expect(t.tokens.slice(0, turn.promptIds.length)).toEqual(turn.promptIds);
      expect(t.tokens.slice(turn.promptIds.length, turn.promptIds.length + turn.outputIds.length)).toEqual(turn.outputIds);
      expect(t.lossMask.slice(turn.promptIds.length, turn.promptIds.length + turn.outputIds.length).every((m) => m === 1)).toBe(true);
      expect(t.logprobs.slice(turn.promptIds.length, turn.promptIds.length + turn.outputIds.length)).toEqual(turn.logprobs);
    }
    expect(t.lossMask.filter((m) => m === 1)).toHaveLength(t.turns.reduce((n, x) => n + x.outputIds.length, 0));
  });
});

describe('a rollout whose agent sends a side request in parallel', () => {
  it('google: the side request waits for the main call and is served; it is its own sequence, the main one stays token-exact', async () => {
    // The two parallel calls may reach the loop in either order, so both are answered alike.
    const r = await runtime.submit({ data_source: 'sdk-agent', instance_id: 'sdk-google-side', dialect: 'google+side', oracle: [bash('echo one'), bash('echo one'), bash('echo two'), { content: 'All done.' }] }).result;
    expect([r.outcome, r.finish], JSON.stringify(r.error)).toEqual(['completed', 'no_tool_call']);
    expect(r.evalDetails?.texts).toEqual(['', '', 'All done.', 'title call: bash']);
    const t = r.trajectory;
    expect(t.turns).toHaveLength(4);
    expect(t.diagnostics.continuity).toBe('segmented');
    const merge = t.diagnostics.merge as { calls: number; sequences: number; callsPerSequence: number[] };
    expect([merge.calls, merge.sequences, [...merge.callsPerSequence].sort()]).toEqual([4, 2, [1, 3]]);
    // Each segment is token-exact on its own: its turns' sampled tokens in place with mask 1.
    for (const seg of t.segments!) {
      const start = seg.tokenStart;
      for (const turn of t.turns.slice(seg.turnStart, seg.turnEnd)) {
        const at = start + turn.promptIds.length;
        expect(t.tokens.slice(start, at)).toEqual(turn.promptIds);
        expect(t.tokens.slice(at, at + turn.outputIds.length)).toEqual(turn.outputIds);
        expect(t.lossMask.slice(at, at + turn.outputIds.length).every((m) => m === 1)).toBe(true);
      }
    }
  });
});
