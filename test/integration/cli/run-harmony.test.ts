import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { codecFor } from '../../../src/llm/codec-registry.js';
import type { RolloutResult } from '../../../src/protocol/trajectory.js';
import { GPT_OSS } from '../../fixtures/model-families.js';
import { startFakeLlmProcess, stopServerProcesses } from '../../helpers/server-process.js';

/** gpt-oss end to end: `rollout run --tokenizer DIR` on a harmony vocabulary, through the oracle and through a token-level HTTP engine. */

const repo = fileURLToPath(new URL('../../../', import.meta.url));
const bin = join(repo, 'bin', 'rollout.js');
const codec = codecFor({ tokenizer: GPT_OSS.dir });
const [CALL, RETURN, START] = codec.encode('<|call|><|return|><|start|>');

function rollout(args: string[], cwd: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((res) => {
    execFile(process.execPath, [bin, ...args], { cwd, timeout: 120_000, env: { ...process.env, NO_COLOR: '1' } }, (err, stdout, stderr) => {
      res({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

async function results(out: string): Promise<RolloutResult[]> {
  return (await readFile(join(out, 'trajectories.jsonl'), 'utf8'))
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as RolloutResult);
}

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'run-harmony-'));
});
afterAll(async () => {
  await stopServerProcesses();
  await rm(dir, { recursive: true, force: true });
});

describe('rollout run --tokenizer on gpt-oss (harmony)', { timeout: 120_000 }, () => {
  it('resolves the README tasks as with the default model: every call sampled in harmony, ended by <|call|>, every answer by <|return|>', async () => {
    const r = await rollout(['run', join(repo, 'examples', 'tasks.jsonl'), '--tokenizer', GPT_OSS.dir, '--out', join(dir, 'oracle')], dir);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/resolved\s+15\/20/);
    const rs = await results(join(dir, 'oracle'));
    expect(rs).toHaveLength(20);
    let calls = 0;
    for (const x of rs) {
      const first = codec.decode(x.trajectory.turns[0]!.promptIds);
      expect(first).toMatch(/^<\|start\|>system<\|message\|>You are ChatGPT[\s\S]*# Valid channels: analysis, commentary, final\.[\s\S]*<\|start\|>developer<\|message\|># Instructions\n\n[\s\S]*namespace functions \{[\s\S]*<\|start\|>assistant$/);
      for (const [i, t] of x.trajectory.turns.entries()) {
        const parsed = codec.parseAssistant(t.outputIds);
        expect(parsed.malformed).toEqual([]);
        expect(t.outputIds.at(-1)).toBe(parsed.toolCalls.length > 0 ? CALL : RETURN);
        calls += parsed.toolCalls.length;
        // The next prompt grows from this one and what was sampled, and opens the next assistant message.
        const next = x.trajectory.turns[i + 1];
        if (next) {
          expect(next.promptIds.slice(0, t.promptIds.length + t.outputIds.length)).toEqual([...t.promptIds, ...t.outputIds]);
          expect(codec.decode(next.promptIds.slice(t.promptIds.length + t.outputIds.length))).toMatch(/^<\|start\|>functions\.\w+ to=assistant<\|channel\|>commentary<\|message\|>[\s\S]*<\|end\|><\|start\|>assistant$/);
        }
      }
    }
    expect(calls).toBeGreaterThan(20);
    expect(START).toBe(200006);
  });

  it('trains an agent program through the LLM proxy: the harness examples, one token-exact sequence each, or segments where the agent rewrites its history', async () => {
    const r = await rollout(['run', join(repo, 'examples', 'harness', 'tasks.jsonl'), '--tokenizer', GPT_OSS.dir, '--out', join(dir, 'harness')], dir);
    expect([r.code, r.stdout]).toEqual([0, expect.stringMatching(/resolved\s+4\/4/)]);
    const rs = await results(join(dir, 'harness'));
    expect(rs.map((x) => [x.instanceId, (x.trajectory.segments ?? []).length > 1]).sort()).toEqual([
      ['harness-count-stream', false],
      ['harness-fix-rewriting', true],
      ['harness-hello', false],
      ['harness-sum-rewriting-stream', true],
    ]);
    for (const x of rs) for (const t of x.trajectory.turns) expect([CALL, RETURN]).toContain(t.outputIds.at(-1));
  });

  it('runs the same tasks token-in/token-out against an HTTP engine serving that vocabulary (rollout fake-llm --tokenizer)', async () => {
    const stem = join(repo, 'examples', 'stem.jsonl');
    const fake = await startFakeLlmProcess(['--tasks', stem, '--tokenizer', GPT_OSS.dir]);
    const r = await rollout(['run', stem, '--backend', fake.url, '--tokenizer', GPT_OSS.dir, '--out', join(dir, 'http')], dir);
    expect([r.code, r.stdout]).toEqual([0, expect.stringMatching(/outcomes\s+completed 6[\s\S]*resolved\s+5\/6/)]);
    for (const x of await results(join(dir, 'http'))) for (const t of x.trajectory.turns) expect([CALL, RETURN]).toContain(t.outputIds.at(-1));
  });
});
