/**
 * The visualizer's token view asks the server for the text of every token of a trajectory
 * (`GET /v1/rollouts/:id/tokens`, src/server/token-text.ts). Measured on a 30k-token trajectory
 * of real Qwen3 tokens (the repository's docs and sources, with multi-byte characters): the per-token decode, cold
 * (first trajectory: every id decoded once) and warm (ids cached), against decoding the whole
 * sequence in one call in the same process — the least any decode costs. Medians of 5.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { codecFor } from '../src/llm/codec-registry.js';
import { tokenTexts } from '../src/server/token-text.js';
import { median, report, round } from './stats.js';

const codec = codecFor({});
// Real text: this repository's docs and sources (prose and code, a few thousand distinct ids),
// with multi-byte characters mixed in.
const here = dirname(fileURLToPath(import.meta.url));
const files = [...readdirSync(join(here, '../docs')).map((f) => join(here, '../docs', f)), ...readdirSync(join(here, '../src/server')).map((f) => join(here, '../src/server', f))].filter((f) => /\.(md|ts)$/.test(f)).sort();
const ids: number[] = [];
for (const f of files) {
  if (ids.length >= 30_000) break;
  ids.push(...codec.encode(`${readFileSync(f, 'utf8')}\n😀 你好 naïve\n`));
}
ids.length = 30_000;

const time = (f: () => unknown): number => {
  const t = performance.now();
  f();
  return performance.now() - t;
};
// Cold: a fresh codec object has an empty id cache (the cache is per codec object).
const coldMs = time(() => tokenTexts({ decode: (x) => codec.decode(x) }, ids));
tokenTexts(codec, ids);
const warm: number[] = [];
const whole: number[] = [];
for (let i = 0; i < 5; i++) {
  whole.push(time(() => codec.decode(ids)));
  warm.push(time(() => tokenTexts(codec, ids)));
}
const warmMs = median(warm);
const wholeMs = median(whole);
const distinct = new Set(ids).size;
report('token-text', {
  tokens: ids.length,
  distinct_ids: distinct,
  cold_ms: round(coldMs, 1),
  warm_ms: round(warmMs, 1),
  whole_decode_ms: round(wholeMs, 1),
  cold_ratio_vs_whole_decode: round(coldMs / wholeMs, 2),
  warm_ratio_vs_whole_decode: round(warmMs / wholeMs, 2),
  joined_equals_decode: tokenTexts(codec, ids).join('') === codec.decode(ids),
});
