/**
 * Integrity monitor benchmark (#27): what the per-action file observation costs, against the
 * action without it, in the same run (interleaved action by action so both see the same load).
 *
 * - monitor_action_ratio: an action (`echo` appending to a file, through runtime → host → pty)
 *   followed by the monitor's observation, over the action alone, medians, on the SWE sample
 *   repository (examples/swe-sample/repo);
 * - observe_roundtrip_p50_ms: one observation (runtime → host scan → runtime) on that workspace;
 * - monitor_rollout_overhead_ms: the monitor's added time per SWE-sample rollout, measured as
 *   the start plus one observation per action of the example's oracle run (3 actions):
 *   (actions + 1) × observe_roundtrip_p50_ms;
 * - monitor_action_ratio_5k / observe_roundtrip_p50_ms_5k: the same on a workspace of 5,000
 *   files (a mid-sized real repository), where the scan dominates;
 * - violations_per_hostile_case: violations found for edit / delete / conftest / sitecustomize
 *   / link cases run on the sample workspace (each must be 1).
 *
 * Run: npx tsx bench/integrity.ts
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createSandboxProvider } from '../src/sandbox/index.js';
import type { Sandbox } from '../src/sandbox/sandbox.js';
import { median, report, round } from './stats.js';

const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-integrity-'));
fs.chmodSync(stateDir, 0o711);
const provider = createSandboxProvider({ stateDir, hosts: 1 });
const sample = path.resolve(import.meta.dirname, '../examples/swe-sample/repo');
const PROTECT = ['tests/test_intervals.py', 'tests/test_text.py', 'conftest.py', 'sitecustomize.py', 'usercustomize.py'];
const N = Number(process.env.BENCH_INTEGRITY_N ?? 150);

async function interleaved(sb: Sandbox): Promise<{ off: number; on: number; observe: number }> {
  await sb.integrity!({ op: 'start', protect: PROTECT });
  const off: number[] = [];
  const on: number[] = [];
  const obs: number[] = [];
  for (let i = 0; i < N; i++) {
    let t = performance.now();
    await sb.bash({ command: `echo ${i} >> notes.txt` });
    off.push(performance.now() - t);
    t = performance.now();
    await sb.bash({ command: `echo ${i} >> notes.txt` });
    const t1 = performance.now();
    await sb.integrity!({ op: 'observe', turn: i });
    const t2 = performance.now();
    on.push(t2 - t);
    obs.push(t2 - t1);
  }
  return { off: median(off), on: median(on), observe: median(obs) };
}

const figures: Record<string, number> = {};
try {
  const sb = await provider.create({ seedDir: sample }, { rolloutId: 'bench-integrity' });
  const small = await interleaved(sb);
  figures.action_p50_ms = round(small.off, 2);
  figures.monitor_action_ratio = round(small.on / small.off, 3);
  figures.observe_roundtrip_p50_ms = round(small.observe, 3);
  figures.monitor_rollout_overhead_ms = round(4 * small.observe, 2);

  const hostile: Record<string, string> = {
    edit: "echo '# x' >> tests/test_intervals.py",
    delete: 'rm tests/test_text.py',
    conftest: "echo 'import pytest' > minilib/conftest.py",
    sitecustomize: "echo 'import sys; sys.exit = print' > sitecustomize.py",
    link: 'rm -f conftest.py sitecustomize.py; ln -s /dev/null conftest.py',
  };
  let turn = 10_000;
  for (const [name, cmd] of Object.entries(hostile)) {
    await sb.bash({ command: cmd });
    figures[`violations_${name}`] = (await sb.integrity!({ op: 'observe', turn: turn++ })).violations.filter((v) => v.kind !== 'delete-protected' || name === 'delete').length;
  }
  await sb.close();

  // A 5,000-file workspace: 50 packages of 100 modules.
  const big = fs.mkdtempSync(path.join(stateDir, 'big-'));
  for (let d = 0; d < 50; d++) {
    fs.mkdirSync(path.join(big, `pkg${d}`));
    for (let f = 0; f < 100; f++) fs.writeFileSync(path.join(big, `pkg${d}`, `mod${f}.py`), `x = ${f}\n`);
  }
  const sb5k = await provider.create({ seedDir: big }, { rolloutId: 'bench-integrity-5k' });
  const large = await interleaved(sb5k);
  figures.monitor_action_ratio_5k = round(large.on / large.off, 3);
  figures.observe_roundtrip_p50_ms_5k = round(large.observe, 3);
  await sb5k.close();
} finally {
  await provider.close();
  fs.rmSync(stateDir, { recursive: true, force: true });
}
report('integrity', figures);
