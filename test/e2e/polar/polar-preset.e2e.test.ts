import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HARNESS_PRESETS } from '../../../src/handlers/tasks/harness-presets/index.js';
import { missingTools } from '../../helpers/system-tools.js';
import { presetProcesses, store, testTag } from '../harness/preset-kit.js';
import { expectPolarShape } from './polar-shape.js';
import { polarServer } from './polar-server.js';

// A harness preset driven through Polar's trainer API on a real `rollout serve`: Polar's `codex`
// (the cheapest CLI to start, bench/harness-presets.ts) runs unchanged from the harness store in
// a real bwrap sandbox, in the task's runtime.workdir, its Responses calls answered by the
// oracle backend replaying the task's turns with codex's own tool (exec_command). The sessions
// must be resolved (a Harbor verifier checks the files), and their traces token-exact against
// the runtime's own record of the rollout, through per_request and prefix_merging.
const PRESET = 'codex';
const VERSION = HARNESS_PRESETS[PRESET].defaultVersion;
const INSTALL = `node bin/rollout.js harness install ${PRESET}`;

/** Null when the preset is in the store; else the skip line (under ROLLOUT_REQUIRE_TOOLS=1, as in CI, a throw). */
function presetMissing(): string | null {
  if (store.installed(PRESET, VERSION)) return null;
  const why = `needs the ${PRESET}@${VERSION} harness preset in ${store.dir} (${INSTALL})`;
  if (process.env['ROLLOUT_REQUIRE_TOOLS'] === '1') throw new Error(`ROLLOUT_REQUIRE_TOOLS set but this test ${why}`);
  process.stderr.write(`skipping: ${why}\n`);
  return why;
}
const skip = missingTools('bwrap') ?? presetMissing();

let work: string;
const polar = polarServer();
const api = polar.api;

beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), 'polar-preset-e2e-'));
  chmodSync(work, 0o755);
  mkdirSync(join(work, 'tests'));
  // The Harbor verifier: the files the CLI's tool calls made, in the workdir the CLI started in.
  writeFileSync(join(work, 'tests', 'test.sh'), 'mkdir -p logs/verifier\nif [ "$(python3 proj/answer.py)" = 42 ] && [ "$(cat proj/out.txt)" = 42 ]; then echo 1; else echo 0; fi > logs/verifier/reward.txt\n');
});
afterAll(() => rmSync(work, { recursive: true, force: true }));


const exec = (cmd: string): { name: string; arguments: Record<string, unknown> } => ({ name: 'exec_command', arguments: { cmd } });
const ORACLE = [
  { tool_calls: [exec("printf 'print(6 * 7)\\n' > answer.py")] },
  { tool_calls: [exec('python3 answer.py > out.txt')] },
  { tool_calls: [exec('cat out.txt')] },
  { content: 'It printed 42.' },
];

describe.skipIf(skip)(`Polar's ${PRESET} preset on rollout serve (bwrap; ${INSTALL})`, () => {
  it('runs the CLI in runtime.workdir, resolves, and its traces are token-exact through per_request and prefix_merging', async () => {
    // On the host's root: the trainer's image name is dropped (--polar-image ignore); polar-image.e2e.test.ts runs codex in an imported image.
    await polar.start(['--backend', 'oracle', '--sandbox', 'bwrap', '--path-root', work, '--polar-image', 'ignore']);
    const { tag, env } = testTag('polar-codex');
    const task = (id: string, builder: string): Record<string, unknown> => ({
      task_id: id,
      instruction: 'Write answer.py that prints 6*7, run it into out.txt, and tell me what it printed.',
      num_samples: 1,
      runtime: { image: 'ghcr.io/trainer/only-it-has:1', workdir: 'proj', prepare: [{ type: 'exec', command: 'mkdir -p proj' }] },
      agent: { harness: PRESET, model_name: 'policy', env, settings: { oracle: ORACLE } },
      builder: { strategy: builder },
      evaluator: { strategy: 'harbor', config: { tests_dir: join(work, 'tests'), tests_target: 'tests', verifier_dir: 'logs/verifier', test_command: 'bash tests/test.sh' } },
    });
    expect((await api('POST', '/rollout/task/submit', task('codex-per', 'per_request'))).status).toBe(200);
    expect((await api('POST', '/rollout/task/submit', task('codex-merge', 'prefix_merging'))).status).toBe(200);
    const done = async (id: string): Promise<any> => {
      let last: any;
      await expect.poll(async () => ['completed', 'failed'].includes((last = (await api('GET', `/rollout/task/${id}`)).body).status), { timeout: 200_000, interval: 250 }).toBe(true);
      return last;
    };
    for (const [id, builder] of [['codex-per', 'per_request'], ['codex-merge', 'prefix_merging']] as const) {
      const st = await done(id);
      expectPolarShape(st);
      const s = st.results[0];
      const rec = (await api('GET', `/v1/rollouts/${s.metadata.rollout_id}`)).body.result;
      const why = JSON.stringify({ status: s.status, error: s.error, details: rec.evalDetails });
      expect([st.status, s.status, s.trajectory.status], why).toEqual(['completed', 'COMPLETED', 'COMPLETED']);
      expect(rec.evalDetails.preset).toBe(`${PRESET}@${VERSION}`);
      expect(rec.evalDetails.harness_exit_code, why).toBe(0);
      // Every request the CLI made was answered, one per scripted turn.
      expect(rec.evalDetails.proxy_requests).toEqual({ '200': ORACLE.length });
      const turns = rec.trajectory.turns as { promptIds: number[]; outputIds: number[]; logprobs: number[] }[];
      expect(turns).toHaveLength(ORACLE.length);
      for (const t of s.trajectory.traces) {
        expect(t.reward).toBe(1);
        expect(t.loss_mask).toHaveLength(t.response_ids.length);
        expect(t.response_logprobs).toHaveLength(t.response_ids.length);
      }
      const traces = s.trajectory.traces as { prompt_ids: number[]; response_ids: number[]; response_logprobs: number[]; loss_mask: number[] }[];
      if (builder === 'per_request') {
        // One trace per call: the call's prompt and sampled ids exactly, every token trainable.
        expect(traces.map((t) => t.prompt_ids)).toEqual(turns.map((t) => t.promptIds));
        expect(traces.map((t) => t.response_ids)).toEqual(turns.map((t) => t.outputIds));
        expect(traces.map((t) => t.response_logprobs)).toEqual(turns.map((t) => t.logprobs));
        expect(traces.every((t) => t.loss_mask.every((m) => m === 1))).toBe(true);
      } else {
        // Merged: the trainable tokens are exactly the sampled ones, in order, with their logprobs.
        expect(traces[0]!.prompt_ids).toEqual(turns[0]!.promptIds);
        const masked = traces.flatMap((t) => t.response_ids.filter((_, i) => t.loss_mask[i] === 1));
        const maskedLp = traces.flatMap((t) => t.response_logprobs.filter((_, i) => t.loss_mask[i] === 1));
        expect(masked).toEqual(turns.flatMap((t) => t.outputIds));
        expect(maskedLp).toEqual(turns.flatMap((t) => t.logprobs));
        expect(traces.length).toBeLessThan(turns.length);
      }
    }
    // Nothing of the CLI's is left running.
    await expect.poll(() => presetProcesses(tag), { timeout: 30_000 }).toEqual([]);
  }, 420_000);
});
