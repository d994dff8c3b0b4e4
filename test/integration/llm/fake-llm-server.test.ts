import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { BackendError, TaskError } from '../../../src/errors.js';
import { HttpBackend } from '../../../src/llm/http-backend.js';
import type { BackendSpec, GenerateRequest } from '../../../src/llm/llm-client.js';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import type { Instance } from '../../../src/protocol/instance.js';
import { startFakeLlmServer, type FakeLlmServer } from '../../../src/testing/fake-llm-server.js';

const codec = createQwen3Codec();
const ROOT = join(import.meta.dirname, '../../..');
const task: Instance = {
  data_source: 'shell',
  instance_id: 'task-1',
  oracle: [{ content: 'Listing.', tool_calls: [{ name: 'bash', arguments: { cmd: 'ls' } }] }, { content: 'Done, two files.' }],
};

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function serve(opts: Parameters<typeof startFakeLlmServer>[0]): Promise<FakeLlmServer> {
  const s = await startFakeLlmServer(opts);
  cleanups.push(() => s.close());
  return s;
}

function backend(url: string, protocol: BackendSpec['protocol']): HttpBackend {
  const b = new HttpBackend({ id: protocol, url, protocol });
  cleanups.push(() => b.close());
  return b;
}

function request(over: Partial<GenerateRequest> = {}): GenerateRequest {
  return { rolloutId: 'r', instance: task, turn: 0, promptIds: codec.encodePrompt([{ role: 'user', content: 'go' }], []), maxTokens: 64, sampling: {}, signal: new AbortController().signal, ...over };
}

describe('startFakeLlmServer', () => {
  it.each(['prorl', 'vllm', 'sglang'] as const)('replays the oracle turn named by the headers over the %s protocol', async (protocol) => {
    const s = await serve({ tasks: [task] });
    const r = await backend(s.url, protocol).generate(request({ turn: 1 }), 5_000);
    expect(r.outputIds).toEqual(codec.encodeAssistant({ content: 'Done, two files.' }));
    expect(r.finishReason).toBe('stop');
  });

  it('asks a vLLM server for its model name when the backend has none', async () => {
    const s = await serve({ tasks: [task] });
    const named = new HttpBackend({ id: 'named', url: s.url, protocol: 'vllm', model: 'other' });
    cleanups.push(() => named.close());
    const err = await named.generate(request(), 5_000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TaskError);
    const r = await backend(s.url, 'vllm').generate(request(), 5_000);
    expect(r.outputIds).toEqual(codec.encodeAssistant(task.oracle![0]!));
  });

  it('cuts a scripted turn at max_tokens and reports length', async () => {
    const s = await serve({ tasks: [task] });
    const r = await backend(s.url, 'sglang').generate(request({ maxTokens: 3 }), 5_000);
    expect(r.outputIds).toEqual(codec.encodeAssistant(task.oracle![0]!).slice(0, 3));
    expect(r.finishReason).toBe('length');
  });

  it('answers an unknown instance with a 400, which the client reports as a TaskError', async () => {
    const s = await serve({ tasks: [task] });
    const err = await backend(s.url, 'prorl').generate(request({ instance: { data_source: 'x', instance_id: 'nope' } }), 5_000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TaskError);
  });

  it('samples random ordinary tokens ending with the end-of-turn token, the same for the same request', async () => {
    const s = await serve({ policy: 'random', seed: 3 });
    const b = backend(s.url, 'vllm');
    const one = await b.generate(request(), 5_000);
    const two = await b.generate(request(), 5_000);
    expect(one.outputIds).toEqual(two.outputIds);
    expect(one.outputIds.at(-1)).toBe(codec.endOfTurnId);
    expect(one.outputIds.slice(0, -1).every((id) => id < 151643)).toBe(true);
    expect(one.logprobs.every((lp) => lp < 0 && lp > Math.log(0.05) - 1e-9)).toBe(true);
  });

  it('answers exit-after requests and then goes away', async () => {
    let exited = false;
    const s = await serve({ exitAfter: 2, onExit: () => (exited = true) });
    const b = backend(s.url, 'prorl');
    await b.generate(request(), 5_000);
    await b.generate(request(), 5_000);
    await expect.poll(() => exited).toBe(true);
    await expect(b.generate(request(), 5_000)).rejects.toBeInstanceOf(BackendError);
    await expect(b.probe(1_000)).resolves.toBe(false);
  });

  it('hands at most maxConcurrent requests to the policy at once and queues the rest', async () => {
    const held: (() => void)[] = [];
    let auto = false;
    const answer = { outputIds: [codec.endOfTurnId], logprobs: [-0.1], finishReason: 'stop' as const };
    const s = await serve({
      maxConcurrent: 2,
      policy: { generate: () => (auto ? Promise.resolve(answer) : new Promise((resolve) => held.push(() => resolve(answer)))) },
    });
    const b = backend(s.url, 'prorl');
    const calls = Array.from({ length: 5 }, (_, turn) => b.generate(request({ turn }), 5_000));
    await expect.poll(() => s.requests).toBe(5);
    expect(held).toHaveLength(2);
    held.shift()!();
    await expect.poll(() => held.length).toBe(2);
    auto = true;
    held.splice(0).forEach((r) => r());
    await Promise.all(calls);
  });

  it('aborts a generation whose client hangs up, and not one whose answer went out', async () => {
    const signals: AbortSignal[] = [];
    let hold = true;
    const answer = { outputIds: [codec.endOfTurnId], logprobs: [-0.1], finishReason: 'stop' as const };
    const s = await serve({
      policy: {
        generate: (req) => {
          signals.push(req.signal);
          return hold ? new Promise((resolve) => req.signal.addEventListener('abort', () => resolve(answer))) : Promise.resolve(answer);
        },
      },
    });
    const answered: [string, AbortSignal][] = [];
    for (const [protocol, body] of [['prorl', { prompt_ids: [1, 2], max_tokens: 4 }], ['openai', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }]] as const) {
      const path = protocol === 'prorl' ? '/generate' : '/v1/chat/completions';
      hold = true;
      const gone = new AbortController();
      const call = fetch(`${s.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: gone.signal });
      await expect.poll(() => signals.length).toBe(protocol === 'prorl' ? 1 : 3);
      gone.abort();
      await expect(call).rejects.toThrow();
      await expect.poll(() => signals.at(-1)!.aborted, { message: `${protocol}: the hang-up reaches the engine` }).toBe(true);
      hold = false;
      const res = await fetch(`${s.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      expect(res.status, protocol).toBe(200);
      await res.arrayBuffer();
      answered.push([protocol, signals.at(-1)!]);
    }
    // Closing the server closes every response (an answered one's `close` included): none aborts.
    await s.close();
    for (const [protocol, signal] of answered) expect(signal.aborted, `${protocol}: an answered request is not aborted`).toBe(false);
  });

  it('reports and updates its weight version over HTTP', async () => {
    const s = await serve({ weightVersion: 'v1' });
    expect(await (await fetch(`${s.url}/weight_version`)).json()).toEqual({ weight_version: 'v1' });
    await fetch(`${s.url}/update_weight_version`, { method: 'POST', body: JSON.stringify({ weight_version: 'v2' }) });
    expect((await backend(s.url, 'prorl').generate(request(), 5_000)).weightVersion).toBe('v2');
  });

  it.each(['prorl', 'sglang'] as const)('%s: answers a generation with the version it was sampled at, not one set while it ran', async (protocol) => {
    const s = await serve({ weightVersion: 'v1', latencyMs: 300 });
    const pending = backend(s.url, protocol).generate(request(), 5_000);
    // Arrived (its version is taken as it arrives); it answers only after its 300 ms latency.
    await expect.poll(() => s.requests).toBe(1);
    await fetch(`${s.url}/update_weight_version`, { method: 'POST', body: JSON.stringify({ weight_version: 'v2' }) });
    expect((await pending).weightVersion).toBe('v1');
    expect((await backend(s.url, protocol).generate(request(), 5_000)).weightVersion).toBe('v2');
  });
});

describe('rollout fake-llm', () => {
  it('serves the instances of a task file and exits 0 on SIGTERM', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fake-llm-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'tasks.jsonl');
    writeFileSync(file, `${JSON.stringify(task)}\n`);
    const proc = spawn(process.execPath, [join(ROOT, 'bin/rollout.js'), 'fake-llm', '--port', '0', '--tasks', file, '--protocol', 'vllm'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    // Killed on every path: a failed or timed-out test must not leave the server running.
    cleanups.push(async () => {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill('SIGKILL');
      await once(proc, 'exit');
    });
    cleanups.push(() => {
      if (proc.exitCode === null) proc.kill('SIGKILL');
    });
    let out = '';
    const url = await new Promise<string>((resolve, reject) => {
      proc.stdout!.on('data', (c: Buffer) => {
        out += c.toString();
        const m = /listening on (http:\/\/\S+)/.exec(out);
        if (m) resolve(m[1]!);
      });
      proc.once('exit', (code) => reject(new Error(`exited ${code}`)));
    });
    const r = await backend(url, 'vllm').generate(request(), 10_000);
    expect(r.outputIds).toEqual(codec.encodeAssistant(task.oracle![0]!));
    proc.kill('SIGTERM');
    const [code] = await once(proc, 'exit');
    expect(code).toBe(0);
    // Spawning the CLI (tsx start-up) takes seconds on a loaded machine.
  }, 120_000);
});
