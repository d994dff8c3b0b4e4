import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { AgentHandler } from '../../../src/proxy/agent-contract.js';
import { parseBackendAddress } from '../../../src/llm/backend-address.js';
import { BackendPool } from '../../../src/llm/backend-pool.js';
import { HttpBackend } from '../../../src/llm/http-backend.js';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import type { Instance } from '../../../src/protocol/instance.js';
import type { ToolSchema } from '../../../src/protocol/messages.js';
import type { RolloutResult } from '../../../src/protocol/trajectory.js';
import { createRuntime } from '../../../src/runtime/runtime.js';
import { startFakeLlmServer } from '../../../src/testing/fake-llm-server.js';

const codec = createQwen3Codec();
const ROOT = join(import.meta.dirname, '../../..');
const tools: ToolSchema[] = [{ type: 'function', function: { name: 'bash', description: 'Runs a command.', parameters: { type: 'object', properties: { cmd: { type: 'string' } } } } }];
const task: Instance = {
  data_source: 'oa',
  instance_id: 'oa-1',
  oracle: [{ content: 'Listing.', tool_calls: [{ name: 'bash', arguments: { cmd: 'ls' } }] }, { content: 'Two files.' }],
};

/** Answers every tool call with a fixed listing; stops when a turn has no tool call. */
const agent: AgentHandler = {
  name: 'oa',
  async init() {
    return { messages: [{ role: 'system', content: 'You act.' }, { role: 'user', content: 'List the files.' }], tools };
  },
  async act(ctx) {
    const calls = ctx.assistant.tool_calls;
    if (calls.length === 0) return { messages: [], observations: [], stop: 'no_tool_call' };
    const messages = calls.map((c, i) => {
      c.id ??= `call_${ctx.turn}_${i}`;
      return { role: 'tool' as const, content: 'a.txt b.txt', name: c.name, tool_call_id: c.id };
    });
    return { messages, observations: [], stop: null };
  },
  async eval() {
    return { reward: 1, resolved: true };
  },
};

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** One rollout of `task` through a pool holding `address`. */
async function rollout(address: string, sampling: Record<string, unknown> = {}): Promise<RolloutResult> {
  const pool = new BackendPool({ probeIntervalMs: 0 });
  cleanups.push(() => pool.close());
  pool.addBackend(parseBackendAddress(address));
  const rt = createRuntime({ llm: pool, codec, handlers: [agent], detectDrift: true, retries: { max: 0, backoffMs: 0, backoffMaxMs: 0 } });
  cleanups.push(() => rt.close());
  return rt.submit(task, { max_iterations: 5, ...sampling }).result;
}

/** Spawns `rollout fake-llm` and waits for its `listening on` line. */
async function spawnFake(args: string[]): Promise<{ proc: ChildProcess; url: string }> {
  const proc = spawn(process.execPath, [join(ROOT, 'bin/rollout.js'), 'fake-llm', '--port', '0', ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  cleanups.push(async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGTERM');
      await once(proc, 'exit');
    }
  });
  let out = '';
  let err = '';
  proc.stderr!.on('data', (c: Buffer) => (err += c.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    proc.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve(m[1]!);
    });
    proc.once('exit', (code) => reject(new Error(`fake-llm exited with ${code}: ${err}`)));
  });
  return { proc, url };
}

describe('OpenAI chat-completions backends', () => {
  it('runs a tool-calling rollout against an address ending in /v1 and records the engine\'s token ids', async () => {
    const s = await startFakeLlmServer({ tasks: [task], protocol: 'openai' });
    cleanups.push(() => s.close());
    const r = await rollout(`${s.url}/v1`);
    expect(r.outcome).toBe('completed');
    expect(r.finish).toBe('no_tool_call');
    const t = r.trajectory;
    expect(t.tokenSource).toBe('engine');
    expect(t.turns.map((x) => [x.tokenSource, x.logprobSemantics, x.finishReason])).toEqual([
      ['engine', 'raw', 'stop'],
      ['engine', 'raw', 'stop'],
    ]);
    expect(t.turns[0]!.outputIds).toEqual(codec.encodeAssistant(task.oracle![0]!));
    expect(t.turns[1]!.outputIds).toEqual(codec.encodeAssistant(task.oracle![1]!));
    // The server rendered the messages and tools it was sent into exactly our append-only prompt.
    expect(t.diagnostics.drift).toEqual([]);
    const assistant = t.messages.find((m) => m.role === 'assistant')!;
    expect(assistant.tool_calls).toMatchObject([{ name: 'bash', arguments: { cmd: 'ls' } }]);
    expect(t.turns[1]!.promptIds.slice(0, t.turns[0]!.promptIds.length)).toEqual(t.turns[0]!.promptIds);
  });

  it('re-tokenizes the reply of a server that sends no token ids (rollout fake-llm --protocol openai --no-token-ids) and marks the trajectory', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'oa-fake-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'tasks.jsonl');
    writeFileSync(file, `${JSON.stringify(task)}\n`);
    const { url } = await spawnFake(['--tasks', file, '--protocol', 'openai', '--no-token-ids']);
    const r = await rollout(`openai+${url}/v1`);
    expect(r.outcome).toBe('completed');
    expect(r.trajectory.tokenSource).toBe('retokenized');
    expect(r.trajectory.turns.map((x) => x.tokenSource)).toEqual(['retokenized', 'retokenized']);
    // The scripted replies re-tokenize to the ids they were rendered from, so the server's
    // logprobs line up one to one and are kept.
    expect(r.trajectory.turns[0]!.outputIds).toEqual(codec.encodeAssistant(task.oracle![0]!));
    expect(r.trajectory.turns[0]!.logprobs.every((x) => x < 0)).toBe(true);
    expect(r.trajectory.messages.find((m) => m.role === 'assistant')!.tool_calls).toMatchObject([{ name: 'bash', arguments: { cmd: 'ls' } }]);
  }, 120_000);

  it('sends return_token_ids once to a server that refuses it, then never again', async () => {
    const s = await startFakeLlmServer({ tasks: [task], protocol: 'openai', openaiTokenIds: false });
    cleanups.push(() => s.close());
    const b = new HttpBackend({ ...parseBackendAddress(`${s.url}/v1`), id: 'oa' });
    cleanups.push(() => b.close());
    const chat = { messages: [{ role: 'user' as const, content: 'go' }], tools, codec };
    const req = { rolloutId: 'r', instance: task, turn: 0, promptIds: [], maxTokens: 64, sampling: {}, signal: new AbortController().signal, chat };
    const first = await b.generate(req, 5_000);
    expect(first.tokenSource).toBe('retokenized');
    expect(s.requests).toBe(2);
    expect([...b.droppedFields]).toEqual(['return_token_ids']);
    await b.generate({ ...req, turn: 1 }, 5_000);
    expect(s.requests).toBe(3);
  });

  it('answers health on GET /v1/models and discovers the model name there', async () => {
    const s = await startFakeLlmServer({ tasks: [task], protocol: 'openai' });
    cleanups.push(() => s.close());
    const b = new HttpBackend({ ...parseBackendAddress(`${s.url}/v1`), id: 'oa' });
    cleanups.push(() => b.close());
    await expect(b.probe(2_000)).resolves.toBe(true);
    const wrong = new HttpBackend({ ...parseBackendAddress(`${s.url}/v1?model=nope`), id: 'oa2' });
    cleanups.push(() => wrong.close());
    const chat = { messages: [{ role: 'user' as const, content: 'go' }], tools, codec };
    const req = { rolloutId: 'r', instance: task, turn: 0, promptIds: [], maxTokens: 64, sampling: {}, signal: new AbortController().signal, chat };
    await expect(wrong.generate(req, 5_000)).rejects.toThrow(/does not exist/);
    await expect(b.generate(req, 5_000)).resolves.toMatchObject({ tokenSource: 'engine' });
  });

  it('ends a rollout whose last turn was cut by the token limit as truncated with finish length', async () => {
    const s = await startFakeLlmServer({ tasks: [task], protocol: 'openai' });
    cleanups.push(() => s.close());
    const r = await rollout(`${s.url}/v1`, { max_output_tokens: 3 });
    expect(r.trajectory.turns.at(-1)!.finishReason).toBe('length');
    expect(r.outcome).toBe('truncated');
    expect(r.finish).toBe('length');
  });
});
