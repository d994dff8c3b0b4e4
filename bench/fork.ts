/**
 * Sandbox fork benchmark (#26): a fork against re-creating the same state, in the same run.
 *
 * The state: a host-root sandbox whose workspace holds 10,000 files, 100 MB in all, built by
 * BUILD_COMMANDS (bash commands, the "prefix's actions"), plus a little shell state.
 *
 * - fork_p50_ms: `fork({ rolloutIds: [4 ids], keepParent: false })`, from the call to 4 branches
 *   ready to act (shells started, shell state restored), in the steady state of a trainer that
 *   forks repeatedly: the host's fork pool (src/sandbox/fork-pool.ts) holds branches of the
 *   parent's configuration, parked at their gates. The parent is a branch of the run's first
 *   fork (a tree's second level: a pool serves the forks of one parent and of its branches, which
 *   share its uid), holding the same 10,000 files and shell state; the parent's workspace is
 *   shared, no copy;
 * - fork_cold_p50_ms: the same fork with the pool empty for the parent's configuration (the
 *   first fork of a rollout: its branches launched by the fork itself), of the freshly built
 *   parent; fork_cold_over_replay = replay_p50_ms / fork_cold_p50_ms;
 * - fork_prewarmed_p50_ms: the first fork of a freshly built parent (not a branch) whose host was
 *   asked to park K branches of its configuration first (`Sandbox.prewarmFork`, as the runtime
 *   does for a tree's root once its sandbox is made), timed once they all wait at their gates;
 *   the bench fails unless the fork took all K from the pool. fork_prewarmed_over_replay =
 *   replay_p50_ms / fork_prewarmed_p50_ms; fork_prewarmed_cpu_p50_ms its CPU time (the prewarm's
 *   launches are before the window, as a refill's are for fork_p50_ms). Its parents' builds are
 *   not replays of the baseline (replay_p50_ms keeps its own runs);
 * - fork_keep_parent_p50_ms: keepParent (default), one parent forked RUNS times (the first cold,
 *   the others from the pool): the workspace is copied each time;
 * - replay_p50_ms: re-creating the same state the way the rollout made it: starting a sandbox
 *   and replaying the prefix's actions, BUILD_COMMANDS, one bash call per action
 *   (`replay_actions` of them) — the issue's baseline;
 * - replay_one_command_p50_ms: the cheapest replay there is: starting a sandbox and running every
 *   action in one bash call (no per-call round trip);
 * - replay_k_p50_ms: re-creating the fork's output without a fork — K sandboxes, each replaying
 *   the prefix's actions, all K at once (as a trainer would start K siblings from the prompt);
 *   fork_over_replay_k = replay_k_p50_ms / fork_p50_ms compares like with like (K states each);
 * - fork_over_replay = replay_p50_ms / fork_p50_ms (and fork_keep_parent_over_replay,
 *   fork_over_replay_one_command against the single-command replay);
 * - *_cpu_p50_ms: the CPU time of this process's tree (the sandbox host, its shells, mounts and
 *   copies) over each fork or replay, from /proc (10 ms ticks): steadier than wall time on a
 *   shared machine; a fork's leaves out the parent it closes and the pool's refill after it;
 * - fork_cpu_over_replay: replay_cpu_p50_ms / fork_cpu_p50_ms;
 * - frozen_p50_ms / frozen_keep_parent_p50_ms: how long the parent's processes were frozen;
 * - branch_disk_bytes / branch_disk_after_write_bytes: what a branch's own tmpfs holds (its
 *   overlay upper dir) right after the fork and after it writes 1 MB; parent_disk_bytes for scale;
 * - branch_mem_bytes / branch_mem_after_write_bytes: the branch's memory cgroup usage, likewise;
 * - load_avg_1m: the machine's load average at the end (the figures are from a shared machine).
 *
 * Nothing is timed while the pool refills: after each fork the bench waits until every parked
 * branch waits at its gate (their launches would otherwise slow the next replay, flattering the
 * ratios).
 *
 * Run: npx tsx bench/fork.ts (as root, with the cgroup v1 freezer; `BENCH_FORK_RUNS` sets the
 * number of forks per mode, default 5).
 */
import fs, { readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createSandboxProvider } from '../src/sandbox/index.js';
import type { Sandbox } from '../src/sandbox/sandbox.js';
import { median, report, round } from './stats.js';
import { parkedAtGate, pooledIds } from '../test/integration/fork/pool-dirs.js';

const K = 4;
const RUNS = Number(process.env['BENCH_FORK_RUNS'] ?? 5);
const FILES = 10_000;
const FILE_BYTES = 10 * 1024;
const DIRS = 10;

/**
 * The prefix's actions, the state they build: 10 actions of 1,000 files of 10 KiB each, then one
 * setting shell state — 11 bash calls. The cheapest actions that can build such a workspace
 * (bash's builtin printf, no process per file, no compute, no network): a real prefix's actions
 * (installs, builds, test runs) cost far more to replay, so the ratio here is a floor.
 */
const BUILD_COMMANDS = [
  ...Array.from({ length: DIRS }, (_, d) => `mkdir -p d${d} && for i in {1..${FILES / DIRS}}; do printf '%${FILE_BYTES}s' '' > d${d}/f$i; done`),
  'cd d3 && export RUN_ID=bench && greet() { echo hi; }',
];

if (process.getuid?.() !== 0 || !fs.existsSync('/sys/fs/cgroup/freezer/cgroup.procs')) {
  console.log('fork bench needs root and the cgroup v1 freezer controller: skipped');
  report('fork', { skipped: true });
  process.exit(0);
}

const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-fork-'));
fs.chmodSync(stateDir, 0o711);
const provider = createSandboxProvider({ driver: 'bwrap', hosts: 1, stateDir, timeouts: { bashMs: 300_000, noOutputMs: 300_000 } });
const figures: Record<string, number | string | boolean> = {};

async function run(sb: Sandbox, command: string): Promise<string> {
  const r = await sb.bash({ command });
  if (r.exitCode !== 0) throw new Error(`${command}: exit ${r.exitCode}: ${r.output}`);
  return r.output.trim();
}

/**
 * CPU time, in ms (USER_HZ ticks of 10 ms), of each process of this one's tree (the sandbox host,
 * its shells, mounts and copies), each counting its reaped children (utime + stime + cutime +
 * cstime). Keyed by pid and start time.
 */
function cpuTree(): Map<string, number> {
  const all: Array<{ key: string; pid: number; ppid: number; ms: number }> = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const s = readFileSync(`/proc/${d}/stat`, 'utf8');
      const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
      all.push({ key: `${d}:${f[19]}`, pid: Number(d), ppid: Number(f[1]), ms: (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) * 10 });
    } catch {
      // gone meanwhile
    }
  }
  const children = new Map<number, typeof all>();
  for (const p of all) children.set(p.ppid, [...(children.get(p.ppid) ?? []), p]);
  const out = new Map<string, number>();
  const stack = all.filter((p) => p.pid === process.pid);
  while (stack.length) {
    const p = stack.pop()!;
    out.set(p.key, p.ms);
    stack.push(...(children.get(p.pid) ?? []));
  }
  return out;
}

/**
 * The CPU time the tree used since `before` (a {@link cpuTree}): what every process alive now used
 * since then (all of it for a new one). A process that left the tree unreaped by it (a closed
 * sandbox's, killed) is not counted: its time before was not this window's.
 */
function cpuSince(before: Map<string, number>): number {
  let ms = 0;
  for (const [k, v] of cpuTree()) ms += v - (before.get(k) ?? 0);
  return ms;
}

/** A sandbox with the state built, one bash call per action (or all in one call): the replay, timed. */
async function build(oneCommand = false): Promise<{ sb: Sandbox; ms: number; cpu: number }> {
  const c0 = cpuTree();
  const t = performance.now();
  const sb = await provider.create({}, { rolloutId: 'bench-fork' });
  if (oneCommand) await run(sb, BUILD_COMMANDS.map((c) => `{ ${c}; }`).join(' && '));
  else for (const c of BUILD_COMMANDS) await run(sb, c);
  return { sb, ms: performance.now() - t, cpu: cpuSince(c0) };
}

/** Bytes used on the filesystem holding the sandbox's /workspace (a branch: its overlay's upper tmpfs). */
async function diskBytes(sb: Sandbox): Promise<number> {
  const [blocks, free, size] = (await run(sb, "stat -f -c '%b %f %S' /workspace")).split(' ').map(Number) as [number, number, number];
  return (blocks - free) * size;
}

/** Waits until the host's fork pool is still: every parked branch waits at its gate, twice in a row. */
async function poolSettled(): Promise<void> {
  let still = 0;
  for (let i = 0; i < 1000 && still < 2; i++) {
    await new Promise((r) => setTimeout(r, 20));
    const pooled = pooledIds(stateDir);
    still = pooled.length > 0 && parkedAtGate(stateDir).length === pooled.length ? still + 1 : 0;
  }
}

/** The sandbox's memory cgroup usage. */
function memBytes(sb: Sandbox): number {
  return Number(fs.readFileSync(`/sys/fs/cgroup/memory/rollout-runtime/${sb.id}/memory.usage_in_bytes`, 'utf8'));
}

try {
  const replays: number[] = [];
  const replayCpu: number[] = [];
  const replaysOne: number[] = [];
  const replaysK: number[] = [];
  const forks: number[] = [];
  const forkCpu: number[] = [];
  const forksCold: number[] = [];
  const forksPrewarmed: number[] = [];
  const forkPrewarmedCpu: number[] = [];
  const forkKeepCpu: number[] = [];
  const frozen: number[] = [];
  const forksKeep: number[] = [];
  const frozenKeep: number[] = [];
  const fork = async (sb: Sandbox, tag: string): Promise<{ f: Awaited<ReturnType<NonNullable<Sandbox['fork']>>>; ms: number; cpu: number }> => {
    const c0 = cpuTree();
    const t = performance.now();
    const f = await sb.fork!({ rolloutIds: Array.from({ length: K }, (_, j) => `${tag}-${j}`), keepParent: false });
    const ms = performance.now() - t;
    return { f, ms, cpu: cpuSince(c0) };
  };
  // keepParent false: each fork consumes its parent, so each run builds one (that build is a
  // replay too), forks it (cold: a new uid, no pool yet), then forks one of its branches (warm).
  for (let i = 0; i < RUNS; i++) {
    await poolSettled();
    const { sb, ms, cpu } = await build();
    replays.push(ms);
    replayCpu.push(cpu);
    if (i === 0) {
      const n = Number(await run(sb, 'find /workspace -type f | wc -l'));
      if (n !== FILES) throw new Error(`the workspace holds ${n} files, not ${FILES}`);
      figures.parent_disk_bytes = await diskBytes(sb);
    }
    const cold = await fork(sb, `c-${i}`);
    forksCold.push(cold.ms);
    const [next, ...rest] = cold.f.branches as [Sandbox, ...Sandbox[]];
    await Promise.all(rest.map((b) => b.close()));
    await poolSettled();
    const pooled = new Set(pooledIds(stateDir));
    const warm = await fork(next, `w-${i}`);
    forks.push(warm.ms);
    forkCpu.push(warm.cpu);
    frozen.push(warm.f.frozenMs);
    const hits = warm.f.branches.filter((b) => pooled.has(b.id)).length;
    if (hits !== K) throw new Error(`the warm fork took ${hits} of its ${K} branches from the pool`);
    if (i === 0) {
      const b = warm.f.branches[0]!;
      if ((await run(b, 'pwd; echo $RUN_ID; greet; find /workspace -type f | wc -l')) !== `/workspace/d3\nbench\nhi\n${FILES}`) throw new Error('the branch lacks the shell state or the files');
      figures.branch_disk_bytes = await diskBytes(b);
      figures.branch_mem_bytes = memBytes(b);
      await run(b, 'head -c 1048576 /dev/zero > new-file');
      figures.branch_disk_after_write_bytes = await diskBytes(b);
      figures.branch_mem_after_write_bytes = memBytes(b);
    }
    await Promise.all(warm.f.branches.map((b) => b.close()));
    // The single-command replay, alternated with the per-action one.
    await poolSettled();
    const one = await build(true);
    replaysOne.push(one.ms);
    if (i === 0 && (await run(one.sb, 'pwd; echo $RUN_ID; greet; find /workspace -type f | wc -l')) !== `/workspace/d3\nbench\nhi\n${FILES}`) throw new Error('the one-command replay built another state');
    await one.sb.close();
  }
  // The first fork of a parent prewarmed for it (a tree's root): a fresh parent each run (a new
  // uid, so a new configuration: nothing of the forks above is parked for it).
  for (let i = 0; i < RUNS; i++) {
    await poolSettled();
    const { sb } = await build();
    const parked = await sb.prewarmFork!(K);
    if (parked !== K) throw new Error(`the prewarm parked ${parked} branches, not ${K}`);
    await poolSettled();
    const pooled = new Set(pooledIds(stateDir));
    const pre = await fork(sb, `p-${i}`);
    forksPrewarmed.push(pre.ms);
    forkPrewarmedCpu.push(pre.cpu);
    const hits = pre.f.branches.filter((b) => pooled.has(b.id)).length;
    if (hits !== K) throw new Error(`the prewarmed fork took ${hits} of its ${K} branches from the pool`);
    if (i === 0 && (await run(pre.f.branches[0]!, 'pwd; echo $RUN_ID; greet; find /workspace -type f | wc -l')) !== `/workspace/d3\nbench\nhi\n${FILES}`) throw new Error('the prewarmed branch lacks the shell state or the files');
    await Promise.all(pre.f.branches.map((b) => b.close()));
  }
  // keepParent true: one parent, forked RUNS times.
  await poolSettled();
  const { sb: parent } = await build();
  for (let i = 0; i < RUNS; i++) {
    await poolSettled();
    const c0 = cpuTree();
    const t = performance.now();
    const f = await parent.fork!({ rolloutIds: Array.from({ length: K }, (_, j) => `k-${i}-${j}`) });
    forksKeep.push(performance.now() - t);
    forkKeepCpu.push(cpuSince(c0));
    frozenKeep.push(f.frozenMs);
    if (i === 0) figures.copied_bytes = f.copiedBytes;
    await Promise.all(f.branches.map((b) => b.close()));
  }
  await parent.close();
  // K siblings' states by replay, all at once (after the forks, so their closes never overlap one).
  for (let i = 0; i < RUNS; i++) {
    await poolSettled();
    const tk = performance.now();
    const built = await Promise.all(Array.from({ length: K }, () => build()));
    replaysK.push(performance.now() - tk);
    await Promise.all(built.map((b) => b.sb.close()));
  }
  figures.branches = K;
  figures.files = FILES;
  figures.workspace_bytes = FILES * FILE_BYTES;
  figures.runs = RUNS;
  figures.fork_p50_ms = round(median(forks), 1);
  figures.fork_cold_p50_ms = round(median(forksCold), 1);
  figures.fork_prewarmed_p50_ms = round(median(forksPrewarmed), 1);
  figures.fork_keep_parent_p50_ms = round(median(forksKeep), 1);
  figures.frozen_p50_ms = round(median(frozen), 1);
  figures.frozen_keep_parent_p50_ms = round(median(frozenKeep), 1);
  figures.replay_actions = BUILD_COMMANDS.length;
  figures.replay_p50_ms = round(median(replays), 1);
  figures.replay_one_command_p50_ms = round(median(replaysOne), 1);
  figures.fork_over_replay = round(median(replays) / median(forks), 2);
  figures.fork_cold_over_replay = round(median(replays) / median(forksCold), 2);
  figures.fork_prewarmed_over_replay = round(median(replays) / median(forksPrewarmed), 2);
  figures.fork_over_replay_one_command = round(median(replaysOne) / median(forks), 2);
  figures.replay_k_p50_ms = round(median(replaysK), 1);
  figures.fork_over_replay_k = round(median(replaysK) / median(forks), 2);
  figures.fork_keep_parent_over_replay = round(median(replays) / median(forksKeep), 2);
  figures.fork_cpu_p50_ms = round(median(forkCpu), 0);
  figures.fork_keep_parent_cpu_p50_ms = round(median(forkKeepCpu), 0);
  figures.fork_prewarmed_cpu_p50_ms = round(median(forkPrewarmedCpu), 0);
  figures.replay_cpu_p50_ms = round(median(replayCpu), 0);
  figures.fork_cpu_over_replay = round(median(replayCpu) / median(forkCpu), 2);
  figures.load_avg_1m = round(os.loadavg()[0]!, 2);
} finally {
  await provider.close();
  fs.rmSync(stateDir, { recursive: true, force: true });
}
report('fork', figures);
