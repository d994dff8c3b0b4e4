/**
 * Profiling driver for bench/orchestration.ts's runtime path (not a benchmark: run-all skips
 * files starting with `_`): `node --cpu-prof --import tsx bench/_profile-orchestration.ts`.
 * Runs ORCH_PROFILE_RUNS × ORCH_TOTAL rollouts through `benchRuntime` after a warm-up.
 */
import { benchRuntime, benchTask, keepInFlight } from './fixtures.js';

const TOTAL = Number(process.env.ORCH_TOTAL ?? 5_000);
const RUNS = Number(process.env.ORCH_PROFILE_RUNS ?? 5);
const IN_FLIGHT = 1_000;

async function once(): Promise<number> {
  const rt = benchRuntime(IN_FLIGHT);
  const per = await keepInFlight(TOTAL, IN_FLIGHT, () => rt.submit(benchTask).result);
  await rt.close();
  return per;
}
await once();
const c0 = process.cpuUsage();
const rates: number[] = [];
for (let i = 0; i < RUNS; i++) rates.push(Math.round(await once()));
const c = process.cpuUsage(c0);
console.log(JSON.stringify({ rates, cpu_us_per_rollout: Math.round((c.user + c.system) / (TOTAL * RUNS)) }));
