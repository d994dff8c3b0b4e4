import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import type { RolloutResult } from '../../../src/protocol/trajectory.js';
import { createRuntime, type EmbeddedRuntime } from '../../../src/runtime/runtime.js';
import type { SandboxProvider } from '../../../src/sandbox/sandbox.js';
import { ScriptedPolicy } from '../../../src/testing/scripted-policy.js';
import { makeProvider } from './provider.js';

/**
 * Every example task file through the embedded runtime: real chat template and tokenizer, the
 * scripted policy replaying each instance's oracle, real sandboxes, the built-in handlers.
 */

const EXPECTED_FAILURES = new Set(['math-times-wrong', 'math-no-finish', 'code-vowels-buggy', 'code-gave-up', 'swe-leap-wrong-fix', 'stem-planet-wrong', 'shell-logs-wrong']);
const FILES = ['math', 'code', 'swe', 'stem', 'shell'];

let root: string;
let provider: SandboxProvider;
let runtime: EmbeddedRuntime;
const results = new Map<string, RolloutResult>();

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'handlers-int-'));
  provider = await makeProvider(root);
  const codec = createQwen3Codec();
  runtime = createRuntime({ codec, llm: new ScriptedPolicy({ codec }), sandboxes: provider, stages: { init: 8, run: 8, eval: 8 }, retries: { max: 0 } });
  const all: Promise<void>[] = [];
  for (const f of FILES) {
    const lines = (await readFile(new URL(`../../../examples/${f}.jsonl`, import.meta.url), 'utf8')).split('\n').filter(Boolean);
    for (const line of lines) {
      const inst = JSON.parse(line) as { instance_id: string };
      all.push(runtime.submit(inst).result.then((r) => void results.set(inst.instance_id, r)));
    }
  }
  await Promise.all(all);
}, 120_000);

afterAll(async () => {
  await runtime?.close();
  await provider?.close();
  await rm(root, { recursive: true, force: true });
});

for (const f of FILES) {
  describe(`examples/${f}.jsonl through the runtime`, async () => {
    const lines = (await readFile(new URL(`../../../examples/${f}.jsonl`, import.meta.url), 'utf8')).split('\n').filter(Boolean);
    for (const line of lines) {
      const id = (JSON.parse(line) as { instance_id: string }).instance_id;
      const ok = !EXPECTED_FAILURES.has(id);
      it(`completes ${id} with reward ${ok ? 1 : 0}`, () => {
        const r = results.get(id);
        expect({ outcome: r?.outcome, reward: r?.reward, error: r?.error ?? null }).toEqual({ outcome: 'completed', reward: ok ? 1 : 0, error: null });
      });
    }
  });
}

describe('swe trajectories', () => {
  it('carry the agent diff as git_patch in the eval details', () => {
    expect(results.get('swe-calc-add')?.evalDetails?.git_patch).toMatch(/- {4}return a - b\n\+ {4}return a \+ b/);
  });
});

describe('token trajectories', () => {
  it('mark exactly the sampled tokens with loss mask 1', () => {
    const r = results.get('code-sum') as RolloutResult;
    const sampled = r.trajectory.turns.reduce((n, t) => n + t.outputIds.length, 0);
    expect([r.trajectory.lossMask.filter((m) => m === 1).length, r.trajectory.lossMask.length]).toEqual([sampled, r.trajectory.tokens.length]);
  });
});
