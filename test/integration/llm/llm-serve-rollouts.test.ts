import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentHandler } from '../../../src/proxy/agent-contract.js';
import { BackendPool } from '../../../src/llm/backend-pool.js';
import { ensureTinyGguf } from '../../../src/llm/gguf-writer.js';
import type { LlamaSample } from '../../../src/llm/llama-engine.js';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import type { RolloutResult } from '../../../src/protocol/trajectory.js';
import { startLlmServeProcess, stopServerProcesses, type ServerProcess } from '../../helpers/server-process.js';
import { createRuntime } from '../../../src/runtime/runtime.js';

const ROLLOUTS = 8;
const TURNS = 6;
/** Starts `rollout llm-serve` on a free port with the tiny model and `protocol`. */
function startServer(model: string, protocol: string): Promise<ServerProcess> {
  return startLlmServeProcess(['--model', model, '--port', '0', '--protocol', protocol, '--parallel', '4']);
}

/** One user message per turn and never a stop, so every rollout runs max_iterations turns. */
const talker: AgentHandler = {
  name: 'talk',
  async init() {
    return { messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say something.' }], tools: [] };
  },
  async act(ctx) {
    return { messages: [{ role: 'user', content: `Turn ${ctx.turn + 1} done; go on.` }], observations: [], stop: null };
  },
  async eval() {
    return { reward: 0, resolved: false };
  },
};

describe('rollouts through the pool against two llm-serve engines', () => {
  const servers: ServerProcess[] = [];
  let results: RolloutResult[] = [];
  const samples = new Map<string, LlamaSample & { url: string }>();
  const urlOf = new Map<string, string>();

  beforeAll(async () => {
    const model = ensureTinyGguf({ seed: 1 });
    servers.push(...(await Promise.all([startServer(model, 'prorl'), startServer(model, 'sglang')])));
    const pool = new BackendPool({ probeIntervalMs: 0 });
    pool.addBackend({ id: 'engine-a', url: servers[0]!.url, protocol: 'prorl', weightVersion: 'w0' });
    pool.addBackend({ id: 'engine-b', url: servers[1]!.url, protocol: 'sglang', weightVersion: 'w0' });
    urlOf.set('engine-a', servers[0]!.url).set('engine-b', servers[1]!.url);
    const runtime = createRuntime({ llm: pool, codec: createQwen3Codec(), handlers: [talker], detectDrift: true, retries: { max: 0, backoffMs: 0, backoffMaxMs: 0 } });
    try {
      const handles = Array.from({ length: ROLLOUTS }, (_, i) =>
        runtime.submit({ data_source: 'talk', instance_id: `talk-${i}` }, { max_iterations: TURNS, max_output_tokens: 6, temperature: 1, seed: i }),
      );
      results = await Promise.all(handles.map((h) => h.result));
    } finally {
      await runtime.close();
      await pool.close();
    }
    for (const s of servers) {
      const body = (await (await fetch(`${s.url}/debug/samples`)).json()) as { samples: LlamaSample[] };
      for (const x of body.samples) samples.set(`${x.instanceId}|${x.turn}`, { ...x, url: s.url });
    }
  }, 300_000);

  afterAll(async () => {
    await stopServerProcesses();
  });

  it('ends every rollout as truncated after max_iterations turns', () => {
    expect(results.map((r) => [r.outcome, r.finish, r.trajectory.turns.length])).toEqual(Array.from({ length: ROLLOUTS }, () => ['truncated', 'max_iterations', TURNS]));
  });

  it('gives every turn exactly the ids and logprobs the engine sampled, from the engine that sampled them', () => {
    for (const r of results) {
      r.trajectory.turns.forEach((t, turn) => {
        const s = samples.get(`${r.instanceId}|${turn}`);
        expect(s, `${r.instanceId} turn ${turn}`).toBeDefined();
        expect(t.outputIds).toEqual(s!.outputIds);
        expect(t.logprobs).toEqual(s!.logprobs);
        expect(t.promptIds).toEqual(s!.promptIds);
        expect(urlOf.get(t.backendId)).toBe(s!.url);
        expect(t.weightVersion).toBe('w0');
      });
    }
  });

  it('sets the loss mask on exactly the sampled tokens, with their logprobs', () => {
    for (const r of results) {
      const { tokens, lossMask, logprobs, turns } = r.trajectory;
      const expectedMask = new Array<number>(tokens.length).fill(0);
      const expectedLp = new Array<number>(tokens.length).fill(0);
      for (const t of turns) {
        t.outputIds.forEach((id, i) => {
          expect(tokens[t.promptIds.length + i]).toBe(id);
          expectedMask[t.promptIds.length + i] = 1;
          expectedLp[t.promptIds.length + i] = t.logprobs[i]!;
        });
      }
      expect(lossMask).toEqual(expectedMask);
      expect(logprobs).toEqual(expectedLp);
    }
  });

  it('makes the last prompt plus the last output equal the flat token list', () => {
    for (const r of results) {
      const last = r.trajectory.turns.at(-1)!;
      expect([...last.promptIds, ...last.outputIds]).toEqual(r.trajectory.tokens);
    }
  });

  it('finds no drift between the append-only prompts and a full re-render', () => {
    expect(results.flatMap((r) => r.trajectory.diagnostics.drift)).toEqual([]);
  });

  it('refuses a prompt that does not fit its context with a 400 naming the limit', async () => {
    const res = await fetch(`${servers[0]!.url}/generate`, { method: 'POST', body: JSON.stringify({ prompt_ids: new Array(5000).fill(198), max_tokens: 8 }) });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toMatch(/maximum context length is 4096/);
  });
});
