/**
 * What Polar's trace builders cost on a long session, against what the answer costs anyway: a
 * 64-call agent session (each call 256 sampled ids and 192 ids of tool output, the last prompt
 * ~29k ids). `baseline_us` is `JSON.stringify` of the session's calls (a session result goes out
 * as JSON, prompts included); `per_request_us` and `prefix_merging_us` build the traces
 * (src/server/polar/trace-builder.ts); the `*_x` figures are their ratios to the baseline.
 * `prefix_merging_traces` must be 1 and `per_request_traces` 64 (the session is one chain).
 *
 * Run: npx tsx bench/polar-traces.ts
 */
import { buildTraces, type LlmCall } from '../src/server/polar/trace-builder.js';
import { median, report, round } from './stats.js';

const CALLS = 64;
const calls: LlmCall[] = [];
let prompt: number[] = Array.from({ length: 1024 }, (_, i) => i % 50_000);
for (let t = 0; t < CALLS; t++) {
  const response = Array.from({ length: 256 }, (_, i) => 100 + ((t * 256 + i) % 50_000));
  calls.push({ turn: t, promptIds: prompt, responseIds: response, logprobs: response.map(() => -0.25), finishReason: 'tool_calls', promptMessages: [], responseMessages: [], weightVersion: 1, backendId: 'b' });
  prompt = [...prompt, ...response, ...Array.from({ length: 192 }, (_, i) => 7 + i)];
}

function time(f: () => unknown, reps: number): number {
  const t = performance.now();
  for (let i = 0; i < reps; i++) f();
  return ((performance.now() - t) / reps) * 1000;
}
const baseline = (): number => JSON.stringify(calls).length;
const perRequest = () => buildTraces(calls, 'per_request');
const merging = () => buildTraces(calls, 'prefix_merging');

const reps = 20;
for (const f of [baseline, perRequest, merging]) time(f, reps);
const a: number[] = [];
const b: number[] = [];
const c: number[] = [];
for (let r = 0; r < 9; r++) {
  a.push(time(baseline, reps));
  b.push(time(perRequest, reps));
  c.push(time(merging, reps));
}
const [ma, mb, mc] = [median(a), median(b), median(c)];
report('polar-traces', {
  baseline_us: round(ma, 1),
  per_request_us: round(mb, 1),
  prefix_merging_us: round(mc, 1),
  per_request_x: round(mb / ma, 2),
  prefix_merging_x: round(mc / ma, 2),
  per_request_traces: perRequest().length,
  prefix_merging_traces: merging().length,
  last_prompt_tokens: calls[CALLS - 1]!.promptIds.length,
});
