/**
 * Which library tokenizes: `@lenml/tokenizers` (used) against the official
 * `@huggingface/tokenizers`, per model family. For each: load time, encode throughput on the
 * family's sample texts (ratio hf/lenml, same run), and exactness of each against llama.cpp's
 * tokenizer on a tiny GGUF carrying that vocabulary (node-llama-cpp, vocabulary only).
 * Prints one JSON line per family and a summary line last.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { TokenizerLoader } from '@lenml/tokenizers';
import { getLlama } from 'node-llama-cpp';
import { ensureTinyGguf } from '../src/llm/gguf-writer.js';
import { FAMILIES } from '../test/fixtures/model-families.js';

const llama = await getLlama({ gpu: false, build: 'never', skipDownload: true, progressLogs: false, logLevel: 'error' as never });
const results: Record<string, unknown>[] = [];
for (const fam of Object.values(FAMILIES)) {
  const tj = JSON.parse(readFileSync(join(fam.dir, 'tokenizer.json'), 'utf8'));
  const tc = JSON.parse(readFileSync(join(fam.dir, 'tokenizer_config.json'), 'utf8'));
  let t0 = performance.now();
  const lenml = TokenizerLoader.fromPreTrained({ tokenizerJSON: tj, tokenizerConfig: tc }) as unknown as { encode(t: string, o: object): number[] };
  const lenmlLoadMs = performance.now() - t0;
  t0 = performance.now();
  const hf = new Tokenizer(tj, tc);
  const hfLoadMs = performance.now() - t0;
  const encL = (s: string) => lenml.encode(s, { add_special_tokens: false });
  const encH = (s: string) => hf.encode(s, { add_special_tokens: false }).ids;
  const text = fam.samples.join(' ').repeat(20);
  const time = (f: (s: string) => number[]) => {
    f(text);
    const t = performance.now();
    for (let i = 0; i < 5; i++) f(text);
    return (performance.now() - t) / 5;
  };
  const lenmlMs = time(encL);
  const hfMs = time(encH);
  const out: Record<string, unknown> = { bench: 'tokenizers', family: fam.name, lenmlLoadMs: Math.round(lenmlLoadMs), hfLoadMs: Math.round(hfLoadMs), lenmlEncodeMs: +lenmlMs.toFixed(2), hfEncodeMs: +hfMs.toFixed(2), hfOverLenml: +(hfMs / lenmlMs).toFixed(2) };
  const mismatch = (f: (s: string) => number[], g: (s: string) => number[]) => fam.samples.filter((s) => JSON.stringify(f(s)) !== JSON.stringify(g(s))).length;
  out.lenmlVsHfMismatches = mismatch(encL, encH);
  if (fam.pre) {
    const model = await llama.loadModel({ modelPath: ensureTinyGguf({ seed: 1, vocab: { dir: fam.dir, pre: fam.pre } }), vocabOnly: true });
    const encC = (s: string) => [...model.tokenize(s, true)] as number[];
    out.lenmlVsLlamaCppMismatches = mismatch(encL, encC);
    out.hfVsLlamaCppMismatches = mismatch(encH, encC);
    out.samples = fam.samples.length;
    await model.dispose();
  }
  console.log(JSON.stringify(out));
  results.push(out);
}
await llama.dispose();
console.log(JSON.stringify({ bench: 'tokenizers', results }));
