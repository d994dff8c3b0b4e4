/**
 * Harness presets benchmark (issue #24): per agent CLI, on the scripted task of the e2e tests
 * (write a file, run a command, read its output, answer; the oracle backend answers, so the
 * figures are the CLI's and the runtime's, no model), one rollout at a time:
 *
 * - `<preset>_rollouts_per_s`: completed rollouts per second;
 * - `<preset>_vs_python_agent`: that rate ÷ the rate of examples/harness/simple_agent.py (a
 *   stdlib Python agent, the same four turns) measured in the same run: what the CLI costs
 *   over a minimal agent on the same path;
 * - `<preset>_startup_share`: the CLI's own start-up — from the rollout entering its loop (the
 *   CLI started) to its first LLM call — as a share of the rollout's wall time (median);
 * - `<preset>_startup_p50_ms`, `<preset>_wall_p50_ms`.
 *
 * Needs the CLIs in the harness store (`rollout harness install NAME`; a preset not installed is
 * skipped, saying so). `HARNESS_PRESETS_BENCH=pi,codex` picks presets; `HARNESS_PRESETS_BENCH_N`
 * the rollouts per preset (default 3). The dialects' proxy overhead is bench/harness.ts.
 *
 * Run: npx tsx bench/harness-presets.ts
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { HARNESS_PRESETS, HarnessStore, PRESET_NAMES, type PresetName } from '../src/handlers/tasks/harness-presets/index.js';
import { OracleBackend } from '../src/llm/oracle-backend.js';
import type { RolloutEvent } from '../src/protocol/events.js';
import { createRuntime } from '../src/runtime/runtime.js';
import { createSandboxProvider } from '../src/sandbox/index.js';
import { TestCodec } from '../src/testing/test-codec.js';
import { median, report, round } from './stats.js';

const N = Number(process.env.HARNESS_PRESETS_BENCH_N ?? 3);
const picked = (process.env.HARNESS_PRESETS_BENCH?.split(',') ?? PRESET_NAMES) as PresetName[];
const TASK = { instruction: 'Write answer.py that prints 6*7, run it into out.txt, and tell me what it printed.', eval_command: 'test "$(cat out.txt)" = 42' };
const W = '/workspace';
const TURNS: Record<PresetName, [string, Record<string, unknown>][]> = {
  codex: [['exec_command', { cmd: "printf 'print(6 * 7)\\n' > answer.py" }], ['exec_command', { cmd: 'python3 answer.py > out.txt' }], ['exec_command', { cmd: 'cat out.txt' }]],
  'claude-code': [['Write', { file_path: `${W}/answer.py`, content: 'print(6 * 7)\n' }], ['Bash', { command: 'python3 answer.py > out.txt', description: 'Run' }], ['Read', { file_path: `${W}/out.txt` }]],
  'qwen-code': [['write_file', { file_path: `${W}/answer.py`, content: 'print(6 * 7)\n' }], ['run_shell_command', { command: 'python3 answer.py > out.txt' }], ['read_file', { file_path: `${W}/out.txt` }]],
  pi: [['write', { path: `${W}/answer.py`, content: 'print(6 * 7)\n' }], ['bash', { command: 'python3 answer.py > out.txt' }], ['read', { path: `${W}/out.txt` }]],
  'gemini-cli': [['write_file', { file_path: `${W}/answer.py`, content: 'print(6 * 7)\n' }], ['run_shell_command', { command: 'python3 answer.py > out.txt' }], ['read_file', { file_path: `${W}/out.txt` }]],
  opencode: [['write', { filePath: `${W}/answer.py`, content: 'print(6 * 7)\n' }], ['bash', { command: 'python3 answer.py > out.txt', description: 'Run' }], ['read', { filePath: `${W}/out.txt` }]],
};
const oracle = (turns: [string, Record<string, unknown>][]): unknown[] => [...turns.map(([name, args]) => ({ tool_calls: [{ name, arguments: args }] })), { content: 'It printed 42.' }];
const AGENT = fs.readFileSync(path.join(import.meta.dirname, '../examples/harness/simple_agent.py'), 'utf8');

const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-presets-'));
const provider = createSandboxProvider({ stateDir, hosts: 1 });
const codec = new TestCodec();
const rt = createRuntime({ codec, llm: new OracleBackend({ codec }), sandboxes: provider, retries: { max: 0 }, budgetMs: 300_000, maxModelLen: 1_000_000 });
/** Per rollout id: when its loop began (the CLI was started) and its first LLM call. */
const marks = new Map<string, { loop?: number; first?: number }>();
const sub = rt.events({});
void (async () => {
  for await (const ev of sub as AsyncIterable<RolloutEvent>) {
    const m = marks.get(ev.rolloutId) ?? {};
    if (ev.type === 'rollout.state' && ev.state === 'llmCalling' && m.loop === undefined) m.loop = ev.ts;
    if (ev.type === 'llm.start' && m.first === undefined) m.first = ev.ts;
    marks.set(ev.rolloutId, m);
  }
})();

/** N rollouts one after another: completed per second, median start-up and wall time, median start-up share. */
async function measure(label: string, instance: Record<string, unknown>): Promise<{ perS: number; startup: number; wall: number; share: number }> {
  const startups: number[] = [];
  const walls: number[] = [];
  const shares: number[] = [];
  const t0 = performance.now();
  for (let i = 0; i < N; i++) {
    const r = await rt.submit({ ...instance, instance_id: `${label}-${i}` }).result;
    if (r.outcome !== 'completed' || r.reward !== 1) throw new Error(`${label}: ${r.outcome} reward ${r.reward} ${JSON.stringify(r.error ?? r.evalDetails).slice(0, 2000)}`);
    const m = marks.get(r.id);
    if (m?.loop !== undefined && m.first !== undefined) {
      startups.push(m.first - m.loop);
      walls.push(r.timing.wallMs);
      shares.push((m.first - m.loop) / r.timing.wallMs);
    }
  }
  return { perS: N / ((performance.now() - t0) / 1000), startup: median(startups), wall: median(walls), share: median(shares) };
}

const figures: Record<string, number | string> = { rollouts_per_preset: N };
try {
  const base = await measure('python', {
    data_source: 'harness',
    command: 'python3 agent.py TASK.md',
    files: { 'agent.py': AGENT, 'TASK.md': TASK.instruction },
    eval_command: TASK.eval_command,
    oracle: oracle([['bash', { command: "printf 'print(6 * 7)\\n' > answer.py" }], ['bash', { command: 'python3 answer.py > out.txt' }], ['bash', { command: 'cat out.txt' }]]),
  });
  figures.python_agent_rollouts_per_s = round(base.perS, 3);
  figures.python_agent_startup_share = round(base.share, 3);
  const store = new HarnessStore();
  for (const p of picked) {
    if (!store.installed(p, HARNESS_PRESETS[p].defaultVersion)) {
      console.log(`${p}: not installed (rollout harness install ${p}); skipped`);
      continue;
    }
    const r = await measure(p, { data_source: 'harness', preset: p, ...TASK, oracle: oracle(TURNS[p]) });
    figures[`${p}_rollouts_per_s`] = round(r.perS, 3);
    figures[`${p}_vs_python_agent`] = round(r.perS / base.perS, 3);
    figures[`${p}_startup_share`] = round(r.share, 3);
    figures[`${p}_startup_p50_ms`] = Math.round(r.startup);
    figures[`${p}_wall_p50_ms`] = Math.round(r.wall);
  }
} finally {
  await rt.close();
  await provider.close();
  fs.rmSync(stateDir, { recursive: true, force: true });
}
report('harness-presets', figures);
