/**
 * Integrity monitor benchmark (#27): what the per-action observation (files, executed programs,
 * secret reads, network counters) costs, against the action without it, in the same run
 * (interleaved action by action so both see the same load). Medians.
 *
 * - monitor_action_ratio: as the runtime runs it (attempt-steps.ts): the observation of an
 *   action is sent when the action ends and runs during the next LLM call, and the next action
 *   waits for it. The LLM call is simulated by a wait of LLM_MS (2 ms: far shorter than any real
 *   model call, so whatever of the observation outlasts it is counted). Per-action latency (the
 *   wait for the observation + the action) with the monitor ÷ without, `echo` appending to a file
 *   on the SWE sample repository (examples/swe-sample/repo), with `.git` secret;
 * - monitor_action_ratio_serial: the action followed by an awaited observation ÷ the action
 *   (what `on_violation: fail` and the harness family pay: they wait for the verdict);
 * - monitor_action_ratio_python_serial: the same, serial, with a more realistic action, a
 *   `python3 -c` (an interpreter start, as a test run or a script does);
 * - action_p50_ms / python_action_p50_ms: the baseline actions;
 * - observe_roundtrip_p50_ms: one observation (runtime → host scan + observer drain → runtime);
 * - monitor_rollout_overhead_ms: the monitor's added time per SWE-sample rollout, measured as
 *   the start plus one observation per action of the example's oracle run (3 actions):
 *   (actions + 1) × observe_roundtrip_p50_ms (serial: an upper bound);
 * - monitor_action_ratio_5k / observe_roundtrip_p50_ms_5k: the same on a workspace of 5,000
 *   files (a mid-sized real repository), where the scan dominates (serial);
 * - violations_*: violations found for edit / delete / conftest / sitecustomize / link /
 *   git log --all / a denied program / a TCP and a UDP attempt out (with their address), run on
 *   the sample workspace (each 1);
 * - refused_connect_us_tun / refused_connect_us_noroute / refused_connect_ratio: one refused
 *   TCP connect in a sandbox without network, through the observer's TUN device (the SYN read
 *   and answered with a RST by the helper) ÷ without the monitor (no route: the kernel refuses at
 *   once), interleaved rounds in two sandboxes, medians;
 * - observer_cpu_share_flood: the observer helper's CPU time ÷ wall time while a sandbox sends
 *   UDP as fast as it can for 2 s (bounded by the helper's packet budget, 2,000 a second).
 *
 * Run: npx tsx bench/integrity.ts
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createSandboxProvider } from '../src/sandbox/index.js';
import { NET_PACKET_BUDGET } from '../src/sandbox/integrity/observer-helper.js';
import type { Sandbox } from '../src/sandbox/sandbox.js';
import { median, report, round } from './stats.js';

const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-integrity-'));
fs.chmodSync(stateDir, 0o711);
const provider = createSandboxProvider({ stateDir, hosts: 1 });
const sample = path.resolve(import.meta.dirname, '../examples/swe-sample/repo');
const PROTECT = ['tests/test_intervals.py', 'tests/test_text.py', 'conftest.py', 'sitecustomize.py', 'usercustomize.py'];
const N = Number(process.env.BENCH_INTEGRITY_N ?? 150);

const LLM_MS = 2;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Serial: each action followed by an awaited observation, interleaved with the action alone. */
async function serial(sb: Sandbox, command: (i: number) => string, n = N): Promise<{ off: number; on: number; observe: number }> {
  const off: number[] = [];
  const on: number[] = [];
  const obs: number[] = [];
  for (let i = 0; i < n; i++) {
    let t = performance.now();
    await sb.bash({ command: command(i) });
    off.push(performance.now() - t);
    t = performance.now();
    await sb.bash({ command: command(i) });
    const t1 = performance.now();
    await sb.integrity!({ op: 'observe', turn: i });
    const t2 = performance.now();
    on.push(t2 - t);
    obs.push(t2 - t1);
  }
  return { off: median(off), on: median(on), observe: median(obs) };
}

/** As the runtime runs it: the observation overlaps the (simulated) LLM call; the next action waits for it. */
async function overlapped(sb: Sandbox): Promise<{ off: number; on: number }> {
  const off: number[] = [];
  const on: number[] = [];
  let pending: Promise<unknown> = Promise.resolve();
  for (let i = 0; i < N; i++) {
    let t = performance.now();
    await sb.bash({ command: `echo ${i} >> notes.txt` });
    off.push(performance.now() - t);
    await sleep(LLM_MS);
    t = performance.now();
    await pending;
    await sb.bash({ command: `echo ${i} >> notes.txt` });
    on.push(performance.now() - t);
    pending = sb.integrity!({ op: 'observe', turn: i });
    await sleep(LLM_MS);
  }
  await pending;
  return { off: median(off), on: median(on) };
}

const figures: Record<string, number> = {};
try {
  const sb = await provider.create({ seedDir: sample, setup: ['git init -q && git add -A && git -c user.email=b@b -c user.name=b commit -qm base'] }, { rolloutId: 'bench-integrity' });
  await sb.integrity!({ op: 'start', protect: PROTECT, secret: ['.git'] });
  const ov = await overlapped(sb);
  figures.action_p50_ms = round(ov.off, 3);
  figures.monitor_action_ratio = round(ov.on / ov.off, 3);
  const small = await serial(sb, (i) => `echo ${i} >> notes.txt`);
  figures.monitor_action_ratio_serial = round(small.on / small.off, 3);
  figures.observe_roundtrip_p50_ms = round(small.observe, 3);
  figures.monitor_rollout_overhead_ms = round(4 * small.observe, 2);
  const py = await serial(sb, (i) => `python3 -c 'print(${i})' >> notes.txt`, Math.min(N, 60));
  figures.python_action_p50_ms = round(py.off, 2);
  figures.monitor_action_ratio_python_serial = round(py.on / py.off, 3);

  const hostile: Record<string, string> = {
    edit: "echo '# x' >> tests/test_intervals.py",
    delete: 'rm tests/test_text.py',
    conftest: "echo 'import pytest' > minilib/conftest.py",
    sitecustomize: "echo 'import sys; sys.exit = print' > sitecustomize.py",
    link: 'rm -f conftest.py sitecustomize.py; ln -s /dev/null conftest.py',
    git_log_all: 'git log --all --oneline >/dev/null',
    network: "python3 -c \"import socket\ntry: socket.create_connection(('198.51.100.7', 443), 2)\nexcept OSError: pass\"",
    network_udp: "python3 -c \"import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('198.51.100.8', 53))\"",
  };
  let turn = 10_000;
  for (const [name, cmd] of Object.entries(hostile)) {
    await sb.bash({ command: cmd });
    const found = (await sb.integrity!({ op: 'observe', turn: turn++ })).violations.filter((v) => v.kind !== 'delete-protected' || name === 'delete');
    // A network attempt counts when it carries its address (the TUN device's), not only a count.
    figures[`violations_${name}`] = name.startsWith('network') ? found.filter((v) => v.kind === 'network' && v.address).length : found.length;
  }
  // A denied program is matched by the runtime (integrity-monitor.ts): the host reports the command line.
  await sb.bash({ command: 'python3 -m pip install minilib >/dev/null 2>&1; true' });
  const execs = (await sb.integrity!({ op: 'observe', turn: turn++ })).execs ?? [];
  figures.violations_pip_install = execs.filter((e) => e.argv?.join(' ') === 'python3 -m pip install minilib').length;

  // A refused connect through the TUN device (the monitor on) against no route (no monitor), interleaved.
  const bare = await provider.create({}, { rolloutId: 'bench-integrity-bare' });
  const connects = (n: number) =>
    `python3 -c "import socket, time\nt = time.perf_counter()\nfor i in range(${n}):\n  try: socket.create_connection(('203.0.113.%d' % (i % 250 + 1), 443), 5)\n  except OSError: pass\nprint((time.perf_counter() - t) / ${n} * 1e6)"`;
  const perConnect = async (box: Sandbox): Promise<number> => Number((await box.bash({ command: connects(100) })).output.trim());
  const tunUs: number[] = [];
  const noRouteUs: number[] = [];
  for (let round = 0; round < 9; round++) {
    tunUs.push(await perConnect(sb));
    await sb.integrity!({ op: 'observe', turn: turn++ });
    noRouteUs.push(await perConnect(bare));
  }
  figures.refused_connect_us_tun = round(median(tunUs), 1);
  figures.refused_connect_us_noroute = round(median(noRouteUs), 1);
  figures.refused_connect_ratio = round(median(tunUs) / median(noRouteUs), 2);
  await bare.close();

  // A UDP flood for 2 s: the helper's CPU share stays bounded by its packet budget.
  const helper = observerPid();
  const cpu0 = helper ? cpuMs(helper) : 0;
  const w0 = performance.now();
  await sb.bash({ command: `python3 -c "import socket, time\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nt = time.monotonic()\nn = 0\nwhile time.monotonic() - t < 2:\n  try: s.sendto(b'x', ('198.51.100.%d' % (n % 250 + 1), 9)); n += 1\n  except OSError: pass"` });
  await sb.integrity!({ op: 'observe', turn: turn++ });
  if (helper) figures.observer_cpu_share_flood = round((cpuMs(helper) - cpu0) / (performance.now() - w0), 3);
  figures.observer_packet_budget = NET_PACKET_BUDGET;
  await sb.close();

  // A 5,000-file workspace: 50 packages of 100 modules.
  const big = fs.mkdtempSync(path.join(stateDir, 'big-'));
  for (let d = 0; d < 50; d++) {
    fs.mkdirSync(path.join(big, `pkg${d}`));
    for (let f = 0; f < 100; f++) fs.writeFileSync(path.join(big, `pkg${d}`, `mod${f}.py`), `x = ${f}\n`);
  }
  const sb5k = await provider.create({ seedDir: big }, { rolloutId: 'bench-integrity-5k' });
  await sb5k.integrity!({ op: 'start', protect: PROTECT });
  const large = await serial(sb5k, (i) => `echo ${i} >> notes.txt`);
  figures.monitor_action_ratio_5k = round(large.on / large.off, 3);
  figures.observe_roundtrip_p50_ms_5k = round(large.observe, 3);
  await sb5k.close();
} finally {
  await provider.close();
  fs.rmSync(stateDir, { recursive: true, force: true });
}
figures.loadavg_1m = round(os.loadavg()[0]!, 2);

/** The pid of the observer helper this process's sandbox host started (a python3 -I -S -c below us), or null. */
function observerPid(): number | null {
  const parent = new Map<number, number>();
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
      parent.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // gone
    }
  }
  for (const pid of parent.keys()) {
    let mine = false;
    for (let p = parent.get(pid); p !== undefined && p > 1; p = parent.get(p)) if (p === process.pid) mine = true;
    try {
      if (mine && fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').startsWith('/usr/bin/python3\0-I\0-S\0-c\0')) return pid;
    } catch {
      // gone
    }
  }
  return null;
}

/** User + system CPU time of `pid`, in ms. */
function cpuMs(pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(f[11]) + Number(f[12])) * 1000) / 100; // utime, stime in clock ticks (USER_HZ 100)
}
report('integrity', figures);
