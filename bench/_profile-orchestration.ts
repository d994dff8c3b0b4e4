/**
 * Profiling driver for bench/orchestration.ts's runtime path (not a benchmark: run-all skips
 * files starting with `_`): `node --cpu-prof --import tsx bench/_profile-orchestration.ts`.
 * Runs ORCH_PROFILE_RUNS × ORCH_TOTAL rollouts through `benchRuntime` after a warm-up, and
 * prints the CPU time per rollout.
 *
 * `ORCH_ALLOC=1`: also counts the bytes *allocated* per rollout (V8's sampling heap profiler,
 * with the objects scavenges and mark-compacts collected kept in the samples, so garbage counts
 * too — a figure load does not move), in total and by the file and function that allocated them
 * (`ORCH_ALLOC_TOP` lines, default 40). Compile the tree first (esbuild), or `tsx`'s own code
 * shows in the figures. Run it as `node -e "await import('./bench/_profile-orchestration.js')"`:
 * started as the main module, Node 20 exits 13 (unsettled top-level await) once the inspector
 * session is open.
 *
 * Every sampled object is kept, so keep the run short (`ORCH_PROFILE_RUNS=1 ORCH_TOTAL=3000`):
 * with the defaults the profile's transfer takes minutes.
 *
 * `ORCH_ALLOC_PROMOTED=1` (with `ORCH_ALLOC=1`): leaves out the objects scavenges collected, so
 * only what outlived them counts — what was promoted to the old generation (or is still live):
 * the bytes the GC copied twice and a mark-compact then collected.
 *
 * `ORCH_LIVE=1`: instead, the bytes a *parked* rollout keeps alive (ORCH_TOTAL rollouts parked
 * in llmCalling, the policy never answering; live objects only, after a full GC), by the
 * function that allocated them: what the scavenger copies and promotes for every rollout in
 * flight.
 */
import { Session } from 'node:inspector/promises';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { createRuntime } from '../src/index.js';
import { createTestHandler, ScriptedPolicy, TestCodec } from '../src/testing/index.js';
import { benchRuntime, benchTask, keepInFlight, noopProvider } from './fixtures.js';

const TOTAL = Number(process.env.ORCH_TOTAL ?? 5_000);
const RUNS = Number(process.env.ORCH_PROFILE_RUNS ?? 5);
const ALLOC = process.env.ORCH_ALLOC === '1';
const TOP = Number(process.env.ORCH_ALLOC_TOP ?? 40);
/** With ORCH_ALLOC: leave out what scavenges collected, so only what outlived them (was promoted, or is still live) counts. */
const PROMOTED = process.env.ORCH_ALLOC_PROMOTED === '1';
const IN_FLIGHT = 1_000;

async function once(): Promise<number> {
  const rt = benchRuntime(IN_FLIGHT);
  const per = await keepInFlight(TOTAL, IN_FLIGHT, () => rt.submit(benchTask).result);
  await rt.close();
  return per;
}

interface HeapNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: HeapNode[];
}

/**
 * Sums a sampling heap profile's self sizes by `key` of each node; a native function (`Set`,
 * `slice`…) is charged to its caller's key, named after it.
 */
function bySite(root: HeapNode, key: (n: HeapNode) => string): Map<string, number> {
  const out = new Map<string, number>();
  const walk = (n: HeapNode, parent: string): void => {
    const k = n.callFrame.url ? key(n) : `${parent} > ${n.callFrame.functionName || '(native)'}`;
    if (n.selfSize) out.set(k, (out.get(k) ?? 0) + n.selfSize);
    for (const c of n.children) walk(c, n.callFrame.url ? k : parent);
  };
  walk(root, '(root)');
  return out;
}

const file = (n: HeapNode): string => {
  const u = n.callFrame.url;
  if (!u) return '(native)';
  const m = /node_modules\/([^/]+)/.exec(u);
  return m ? m[1]! : u.replace(/^.*\/(src|bench|machines)\//, '$1/');
};

if (process.env.ORCH_LIVE === '1') {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const codec = new TestCodec();
  const llm = new ScriptedPolicy({ codec, fail: () => 'hang' });
  const rt = createRuntime({ codec, llm, sandboxes: noopProvider, handlers: [createTestHandler()], stages: { init: TOTAL, run: TOTAL }, retainResults: 0 });
  const warm = rt.submit(benchTask);
  while (llm.inFlight < 1) await new Promise((r) => setTimeout(r, 5));
  await warm.cancel();
  gc();
  const s = new Session();
  s.connect();
  await s.post('HeapProfiler.enable');
  await s.post('HeapProfiler.startSampling', { samplingInterval: 64 });
  for (let i = 0; i < TOTAL; i++) rt.submit(benchTask);
  while (llm.inFlight < TOTAL + 1 - 1) await new Promise((r) => setTimeout(r, 5));
  gc();
  const { profile } = (await s.post('HeapProfiler.stopSampling')) as unknown as { profile: { head: HeapNode } };
  const fns = bySite(profile.head, (h) => `${file(h)}:${h.callFrame.lineNumber + 1} ${h.callFrame.functionName || '(anon)'}`);
  const files = bySite(profile.head, file);
  const per = (m: Map<string, number>) => [...m].sort((a, b) => b[1] - a[1]).slice(0, TOP).map(([k, v]) => `${Math.round(v / TOTAL)}\t${k}`).join('\n');
  console.log('live bytes per parked rollout by file:\n' + per(files) + '\nby function:\n' + per(fns));
  console.log(JSON.stringify({ live_bytes_per_parked_rollout: Math.round([...files.values()].reduce((a, b) => a + b, 0) / TOTAL) }));
  s.disconnect();
  await rt.close();
  process.exit(0);
}

await once();
let session: Session | undefined;
if (ALLOC) {
  session = new Session();
  session.connect();
  await session.post('HeapProfiler.enable');
  await session.post('HeapProfiler.startSampling', { samplingInterval: 128, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: !PROMOTED });
}
const c0 = process.cpuUsage();
const rates: number[] = [];
for (let i = 0; i < RUNS; i++) rates.push(Math.round(await once()));
const c = process.cpuUsage(c0);
const out: Record<string, unknown> = { rates, cpu_us_per_rollout: Math.round((c.user + c.system) / (TOTAL * RUNS)) };
if (session) {
  // An inspector reply does not keep the event loop alive: a large profile's would otherwise
  // arrive after Node gave up on the top-level await (exit 13).
  const alive = setInterval(() => {}, 1_000);
  const { profile } = (await session.post('HeapProfiler.stopSampling')) as unknown as { profile: { head: HeapNode } };
  clearInterval(alive);
  const n = TOTAL * RUNS;
  const perRollout = (m: Map<string, number>) =>
    [...m].sort((a, b) => b[1] - a[1]).slice(0, TOP).map(([k, v]) => `${Math.round(v / n)}\t${k}`);
  const files = bySite(profile.head, file);
  out.alloc_bytes_per_rollout = Math.round([...files.values()].reduce((a, b) => a + b, 0) / n);
  console.log('bytes/rollout by file:\n' + perRollout(files).join('\n'));
  const fns = bySite(profile.head, (h) => `${file(h)}:${h.callFrame.lineNumber + 1} ${h.callFrame.functionName || '(anon)'}`);
  console.log('bytes/rollout by function:\n' + perRollout(fns).join('\n'));
  session.disconnect();
}
console.log(JSON.stringify(out));
