/**
 * Task images benchmark (docs/images.md), every ratio against a baseline of the same run:
 *
 * - import_s: `ImageStore.import` of the Python + git + pytest test image (~250 MB, 2 layers)
 *   into an empty store (scripts/build-test-images.sh python builds the layout once, cached);
 * - start_cold_p50_ms: an image sandbox from cached layers to a ready bash (overlay mount, bwrap
 *   on it, pty shell) on a warm host; host_root_start_p50_ms the host-root sandbox, alternated;
 *   start_vs_host_root = their ratio (target <= 2);
 * - start_warm_pool_p50_ms: `create` served by a warm pool (target <= 5 ms);
 * - per_sandbox_rss_mb / per_sandbox_pss_mb: host-side memory of 200 idle image sandboxes
 *   (every process under the sandbox hosts: launcher, bwrap, bash), per sandbox (target <= 20);
 * - swe_eval_p50_s: the EVAL stage of the sample SWE tasks (fresh sandbox from the image, both
 *   patches, pytest, per-test grading) through the embedded runtime.
 *
 * Run: npx tsx bench/images.ts (as root, with bwrap, umoci, mmdebstrap, busybox-static).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { createQwen3Codec } from '../src/llm/qwen3-codec.js';
import { createRuntime } from '../src/runtime/runtime.js';
import { createSandboxProvider, type HostSandboxProvider } from '../src/sandbox/index.js';
import { ImageStore } from '../src/sandbox/images/image-store.js';
import { descendants } from '../src/sandbox/proc.js';
import type { Sandbox } from '../src/sandbox/sandbox.js';
import type { WithWarmPools } from '../src/sandbox/warm-pool.js';
import { ScriptedPolicy } from '../src/testing/scripted-policy.js';
import { busyboxBashLayer, writeOciLayout } from '../test/helpers/images/oci-fixture.js';
import { median, report, round } from './stats.js';

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-images-'));
// Sandboxed processes run as an unprivileged uid: the state dir's parents must be searchable.
fs.chmodSync(root, 0o711);
const figures: Record<string, number> = {};
const store = new ImageStore(path.join(root, 'store'));

try {
  // ---- import ----
  console.log('building / finding the Python test image (cached after the first build)...');
  const layout = execFileSync(path.resolve('scripts/build-test-images.sh'), ['python'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }).trim().split('\n').pop()!;
  let t = performance.now();
  await store.import(layout, { name: 'py' });
  figures.import_s = round((performance.now() - t) / 1000, 2);
  for (const id of ['minilib__minilib-1', 'minilib__minilib-2']) await store.import(layout, { name: `sweb.eval.x86_64.${id.replace('__', '_1776_')}` });
  const bb = busyboxBashLayer(root);
  if (!bb) throw new Error('busybox-static is missing');
  writeOciLayout(path.join(root, 'bb-layout'), [bb], { Env: ['PATH=/bin'], WorkingDir: '/work' });
  await store.import(path.join(root, 'bb-layout'), { name: 'bb' });

  // ---- cold start vs host root, alternated on one warm host ----
  const provider = createSandboxProvider({ hosts: 1, stateDir: path.join(root, 'state'), imageStore: store.dir, timeouts: { hostStartMs: 120_000 }, warmPools: { 'py-pooled': 4 }, limits: { maxProcesses: 64 } }) as WithWarmPools<HostSandboxProvider>;
  await store.import(layout, { name: 'py-pooled' });
  try {
    await (await provider.create({}, { rolloutId: 'warm-host' })).close();
    const cold: number[] = [];
    const host: number[] = [];
    for (let i = 0; i < 15; i++) {
      t = performance.now();
      const a = await provider.create({ image: 'py' }, { rolloutId: `cold-${i}` });
      cold.push(performance.now() - t);
      t = performance.now();
      const b = await provider.create({}, { rolloutId: `host-${i}` });
      host.push(performance.now() - t);
      await Promise.all([a.close(), b.close()]);
    }
    figures.start_cold_p50_ms = round(median(cold), 1);
    figures.host_root_start_p50_ms = round(median(host), 1);
    figures.start_vs_host_root = round(median(cold) / median(host), 2);

    // ---- warm pool ----
    const spec = { image: 'py-pooled' };
    await (await provider.create(spec, { rolloutId: 'pool-seed' })).close();
    const warm: number[] = [];
    const taken: Sandbox[] = [];
    const ready = async (): Promise<void> => {
      while ((provider.warmPoolStats()[0]?.ready ?? 0) < 4) await new Promise((r) => setTimeout(r, 20));
    };
    for (let i = 0; i < 12; i++) {
      if (i % 4 === 0) await ready();
      t = performance.now();
      taken.push(await provider.create(spec, { rolloutId: `pool-${i}` }));
      warm.push(performance.now() - t);
    }
    await Promise.all(taken.map((s) => s.close()));
    figures.start_warm_pool_p50_ms = round(median(warm), 3);
    figures.warm_pool_hits = provider.warmPoolStats()[0]!.hits;
  } finally {
    await provider.close();
  }

  // ---- memory of 200 idle image sandboxes ----
  const many = createSandboxProvider({ hosts: 2, stateDir: path.join(root, 'state-many'), imageStore: store.dir, timeouts: { hostStartMs: 120_000 }, limits: { maxProcesses: 32 } });
  try {
    await Promise.all([0, 1].map(async (i) => (await many.create({}, { rolloutId: `m-warm-${i}` })).close()));
    const mem = (): { rss: number; pss: number } => {
      let rss = 0;
      let pss = 0;
      for (const h of many.hostPids()) {
        for (const pid of descendants(h)) {
          try {
            const s = fs.readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
            rss += Number(/^Rss:\s+(\d+)/m.exec(s)?.[1] ?? 0);
            pss += Number(/^Pss:\s+(\d+)/m.exec(s)?.[1] ?? 0);
          } catch {
            // exited
          }
        }
      }
      return { rss, pss };
    };
    const before = mem();
    const alive: Sandbox[] = [];
    for (let i = 0; i < 200; i += 5) alive.push(...(await Promise.all(Array.from({ length: 5 }, (_, j) => many.create({ image: 'bb' }, { rolloutId: `m-${i + j}` })))));
    const after = mem();
    figures.per_sandbox_rss_mb = round((after.rss - before.rss) / 1024 / alive.length, 2);
    figures.per_sandbox_pss_mb = round((after.pss - before.pss) / 1024 / alive.length, 2);
    figures.sandboxes_alive = alive.length;
    await Promise.all(alive.map((s) => s.close()));
  } finally {
    await many.close();
  }

  // ---- SWE eval ----
  const sweProvider = createSandboxProvider({ hosts: 2, stateDir: path.join(root, 'state-swe'), imageStore: store.dir, timeouts: { hostStartMs: 120_000 } });
  const codec = createQwen3Codec();
  const rt = createRuntime({ codec, llm: new ScriptedPolicy({ codec }), sandboxes: sweProvider, stages: { init: 2, run: 2, eval: 2 }, retries: { max: 0 } });
  try {
    const rows = fs.readFileSync(path.resolve('examples/swe-sample/tasks.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>);
    const evals: number[] = [];
    for (let rep = 0; rep < 3; rep++) {
      const rs = await Promise.all(rows.map((r) => rt.submit({ ...r, trajectory_id: String(rep) } as never).result));
      for (const r of rs) {
        if (!r.resolved) throw new Error(`sample SWE task ${r.instanceId} not resolved: ${JSON.stringify(r.error ?? r.evalDetails).slice(0, 500)}`);
        evals.push(r.timing.evalMs);
      }
    }
    figures.swe_eval_p50_s = round(median(evals) / 1000, 2);
  } finally {
    await rt.close();
    await sweProvider.close();
  }
} catch (err) {
  console.error('bench/images failed:', err);
  process.exitCode = 1;
} finally {
  // Never remove through a mounted overlay: unmount whatever is still mounted under root first.
  for (const line of fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const m = line.split(' ')[4];
    if (m?.startsWith(root)) execFileSync('umount', ['-l', m]);
  }
  fs.rmSync(root, { recursive: true, force: true });
}
report('images', figures);
