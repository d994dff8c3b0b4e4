/**
 * The chat template's render speed with our patch of the Jinja interpreter
 * (patches/@huggingface+jinja+*.patch; docs/llm.md) against the original library, both in this
 * process (the original loaded from a reverse-patched copy). Per family: a continuation-sized
 * render (a user turn, the sentinel assistant turn and one new user turn, as
 * `encodeContinuation` renders on every turn of every rollout) and a 200-message history (a
 * first prompt or a drift check). Medians of alternated batches; `*_speedup` is original over
 * patched. The outputs are compared too (`outputs_equal`). Last: `qwen3_continuation_us`, the
 * whole `encodeContinuation` (render + tokenize) of the Qwen3 codec with the patch.
 *
 * Run: npx tsx bench/chat-template.ts
 */
import * as Jinja from '@huggingface/jinja';
import { readModelDir } from '../src/llm/model-dir.js';
import { createQwen3Codec } from '../src/llm/qwen3-codec.js';
import { FAMILIES } from '../test/fixtures/model-families.js';
import { loadPristineJinja } from '../test/helpers/pristine-jinja.js';
import { median, report, round } from './stats.js';

const pristine = await loadPristineJinja();
const figures: Record<string, number | string | boolean> = {};
const ROUNDS = 9;
const ctx = (messages: { role: string; content: string }[]) => ({ messages, add_generation_prompt: true, bos_token: '<s>', eos_token: '</s>' });
const small = () => ctx([{ role: 'user', content: 'Task.' }, { role: 'assistant', content: 'Sentinel.' }, { role: 'user', content: 'Again.' }]);
const long = () => ctx(Array.from({ length: 200 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: `message ${i}: some text of the conversation` })));

/** µs per call of `f` over one batch of `reps` calls (the callers take medians of alternated batches). */
function time(f: () => unknown, reps: number): number {
  const t = performance.now();
  for (let i = 0; i < reps; i++) f();
  return ((performance.now() - t) / reps) * 1000;
}

let equal = true;
const speedups: Record<'small' | 'long', number[]> = { small: [], long: [] };
for (const fam of Object.values(FAMILIES)) {
  // Every family in FAMILIES has a template (gpt-oss, rendered natively, is not one of them).
  const source = readModelDir(fam.dir).chatTemplate!;
  const ours = new Jinja.Template(source);
  const orig = new pristine.Template(source);
  for (const [kind, make, reps] of [['small', small, 2000], ['long', long, 30]] as const) {
    equal &&= ours.render(make()) === orig.render(make());
    const a: number[] = [];
    const b: number[] = [];
    time(() => ours.render(make()), reps);
    time(() => orig.render(make()), reps);
    for (let r = 0; r < ROUNDS; r++) {
      a.push(time(() => ours.render(make()), reps));
      b.push(time(() => orig.render(make()), reps));
    }
    const [ma, mb] = [median(a), median(b)];
    figures[`${fam.name}_${kind}_us`] = round(ma, 1);
    figures[`${fam.name}_${kind}_original_us`] = round(mb, 1);
    figures[`${fam.name}_${kind}_speedup`] = round(mb / ma, 2);
    speedups[kind].push(mb / ma);
  }
}
figures.median_speedup_small = round(median(speedups.small), 2);
figures.median_speedup_long = round(median(speedups.long), 2);
figures.outputs_equal = equal;

const codec = createQwen3Codec();
const last = codec.encodeAssistant({ content: 'The answer.' });
const next = [{ role: 'user' as const, content: 'Again.' }];
time(() => codec.encodeContinuation(next, last), 2000);
figures.qwen3_continuation_us = round(median(Array.from({ length: ROUNDS }, () => time(() => codec.encodeContinuation(next, last), 2000))), 1);
report('chat-template', figures);
if (!equal) process.exitCode = 1;
