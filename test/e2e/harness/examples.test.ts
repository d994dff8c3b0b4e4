import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PRESET_NAMES } from '../../../src/handlers/tasks/harness-presets/index.js';
import { OracleBackend } from '../../../src/llm/oracle-backend.js';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import { createRuntime, type EmbeddedRuntime } from '../../../src/runtime/runtime.js';
import { createSandboxProvider } from '../../../src/sandbox/index.js';
import type { SandboxProvider } from '../../../src/sandbox/sandbox.js';
import { install, presetProcesses, testTag } from './preset-kit.js';

const DIR = join(import.meta.dirname, '../../../examples/harness');
const task = (preset: string): Record<string, unknown> => JSON.parse(readFileSync(join(DIR, 'presets', `${preset}.jsonl`), 'utf8')) as Record<string, unknown>;

describe('examples/harness/presets: the swe-sample bug per preset', () => {
  it('has a task file per preset, generated as make_preset_tasks.py writes it', () => {
    execFileSync('python3', [join(DIR, 'make_preset_tasks.py'), '--check'], { stdio: 'pipe' });
    for (const p of PRESET_NAMES) expect([task(p).preset, task(p).data_source]).toEqual([p, 'harness']);
  });

  describe('run as `rollout run … --backend oracle` runs it (the Qwen3 tokenizer)', { timeout: 240_000 }, () => {
    let root: string;
    let provider: SandboxProvider;
    let runtime: EmbeddedRuntime;
    beforeAll(async () => {
      await install('pi');
      root = await mkdtemp(join(tmpdir(), 'preset-example-'));
      provider = createSandboxProvider({ stateDir: root, hosts: 1 });
      const codec = createQwen3Codec();
      runtime = createRuntime({ codec, llm: new OracleBackend({ codec }), sandboxes: provider, retries: { max: 0 }, budgetMs: 180_000 });
    }, 600_000);
    afterAll(async () => {
      await runtime?.close();
      await provider?.close();
      if (root) await rm(root, { recursive: true, force: true });
    });

    it('pi fixes the bug with its own tools and the hidden test passes', async () => {
      const { tag, env } = testTag('example-pi');
      const r = await runtime.submit({ ...task('pi'), env }).result;
      expect([r.outcome, r.reward, r.evalDetails?.harness_exit_code], JSON.stringify(r.evalDetails)).toEqual(['completed', 1, 0]);
      expect(String(r.evalDetails?.output)).toMatch(/6 passed/);
      expect(await presetProcesses(tag)).toEqual([]);
    });
  });
});
