/**
 * Runs every `bench/*.ts` (except this file and the helpers) one after another in its own
 * process, echoes its output, and prints a summary: the last JSON line of each, collected into
 * `{"bench":"all","results":[...]}` as the last line.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const skip = new Set(['run-all.ts', 'stats.ts', 'fixtures.ts']);
const files = readdirSync(here)
  .filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts') && !skip.has(f) && !f.startsWith('_'))
  .sort();
const only = process.argv.slice(2);
const results: unknown[] = [];
/** Benches that need longer than the default 180 s (cluster: three steady-state scaling runs, then dispatch and failover; harness: four dialects, each proxied and against its floor; harness-presets: six real agent CLIs, a few rollouts each). */
const timeoutMs: Record<string, number> = { 'cluster.ts': 600_000, 'harness.ts': 1_200_000, 'harness-presets.ts': 1_200_000 };
let failed = 0;
for (const f of files) {
  if (only.length && !only.some((o) => f.includes(o))) continue;
  console.log(`\n=== ${f}`);
  const r = spawnSync(process.execPath, ['--import', 'tsx', join(here, f)], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], timeout: timeoutMs[f] ?? 180_000 });
  process.stdout.write(r.stdout ?? '');
  const last = (r.stdout ?? '').trim().split('\n').pop() ?? '';
  try {
    results.push(JSON.parse(last));
  } catch {
    failed++;
    results.push({ bench: f.replace(/\.ts$/, ''), error: r.error?.message ?? `exit ${r.status}, no JSON last line` });
  }
}
console.log(JSON.stringify({ bench: 'all', results }));
process.exitCode = failed ? 1 : 0;
