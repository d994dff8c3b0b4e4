/**
 * Reading a re-sent request, per dialect (issue #24): what the proxy does with a body before the
 * loop sees it — parse, the nesting check, the dialect's reader — over a conversation of
 * `PROXY_READ_CALLS` calls (default 200) that grows by an answer and a user message each call,
 * with a tool list of ~`PROXY_READ_TOOLS_KB` KB (default 24; the CLIs send 20–60) re-sent
 * unchanged. Two ways, in the same run, on the same bodies:
 *
 * - `whole`: `JSON.parse` of the whole body, the depth walk, the reader (what the proxy did
 *   before src/proxy/resent-body.ts);
 * - `resent`: `ResentBody.parse` (only what the previous body did not have byte for byte), the
 *   reader (which then finds the re-sent history and tools by identity).
 *
 * Each is timed as the best of `PROXY_READ_REPS` (default 20) passes over all the calls (best,
 * not median: on a shared machine the other passes measure the machine), in µs per call.
 * `read_speedup_<dialect>` = whole ÷ resent. No HTTP, no loop: bench/harness.ts has the
 * end-to-end ratio.
 *
 * Run: npx tsx bench/proxy-read.ts
 */
import os from 'node:os';
import { createDialects, type DialectName, type DialectRoute } from '../src/proxy/dialects/index.js';
import { jsonValueDepth } from '../src/proxy/json-value-depth.js';
import { ResentBody } from '../src/proxy/resent-body.js';
import { report, round } from './stats.js';

const CALLS = Number(process.env.PROXY_READ_CALLS ?? 200);
const REPS = Number(process.env.PROXY_READ_REPS ?? 20);
const TOOLS_KB = Number(process.env.PROXY_READ_TOOLS_KB ?? 24);
const ANSWER = 'This is the fixed answer of the proxy benchmark, always the same length.';

type Loose = Record<string, unknown>;

/** A JSON schema of about `kb` KB per tool list, as the CLIs' tools are: nested objects and long descriptions. */
function schemas(kb: number): { name: string; description: string; parameters: Loose }[] {
  const out: { name: string; description: string; parameters: Loose }[] = [];
  for (let i = 0; JSON.stringify(out).length < kb * 1024; i++) {
    out.push({ name: `tool_${i}`, description: `Does thing ${i}. `.repeat(20), parameters: { type: 'object', properties: { path: { type: 'string', description: 'A path. '.repeat(8) }, lines: { type: 'array', items: { type: 'integer' } }, mode: { type: 'string', enum: ['a', 'b', 'c'] } }, required: ['path'] } });
  }
  return out;
}

const tools = schemas(TOOLS_KB);
const KEY: Record<DialectName, string> = { chat: 'messages', responses: 'input', anthropic: 'messages', google: 'contents' };
const ROUTE: Record<DialectName, DialectRoute> = { chat: { dialect: 'chat', op: 'generate' }, responses: { dialect: 'responses', op: 'generate' }, anthropic: { dialect: 'anthropic', op: 'generate' }, google: { dialect: 'google', op: 'generate', model: 'bench', stream: true, sse: true } };
const START: Record<DialectName, () => Loose> = {
  chat: () => ({ model: 'bench', stream: true, max_tokens: 64, messages: [{ role: 'system', content: 'You are a benchmark agent.' }, { role: 'user', content: 'Answer.' }], tools: tools.map((t) => ({ type: 'function', function: t })) }),
  responses: () => ({ model: 'bench', stream: true, instructions: 'You are a benchmark agent.', input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Answer.' }] }], tools: tools.map((t) => ({ type: 'function', ...t })) }),
  anthropic: () => ({ model: 'bench', stream: true, max_tokens: 64, messages: [{ role: 'user', content: [{ type: 'text', text: 'Answer.' }] }], system: [{ type: 'text', text: 'You are a benchmark agent.' }], tools: tools.map((t) => ({ name: t.name, description: t.description, input_schema: t.parameters })) }),
  google: () => ({ contents: [{ role: 'user', parts: [{ text: 'Answer.' }] }], systemInstruction: { parts: [{ text: 'You are a benchmark agent.' }] }, tools: [{ functionDeclarations: tools }], generationConfig: { maxOutputTokens: 64 } }),
};
const GROW: Record<DialectName, (list: unknown[]) => unknown[]> = {
  chat: (l) => [...l, { role: 'assistant', content: ANSWER }, { role: 'user', content: 'Again.' }],
  responses: (l) => [...l, { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: ANSWER }] }, { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Again.' }] }],
  anthropic: (l) => [...l, { role: 'assistant', content: [{ type: 'text', text: ANSWER }] }, { role: 'user', content: [{ type: 'text', text: 'Again.' }] }],
  google: (l) => [...l, { role: 'model', parts: [{ text: ANSWER }] }, { role: 'user', parts: [{ text: 'Again.' }] }],
};

const figures: Record<string, number | string | boolean> = {};
const ctx = { warn: () => undefined };
for (const d of ['chat', 'responses', 'anthropic', 'google'] as const) {
  const bodies: Buffer[] = [];
  let body = START[d]();
  for (let i = 0; i < CALLS; i++) {
    bodies.push(Buffer.from(JSON.stringify(body)));
    body = { ...body, [KEY[d]]: GROW[d](body[KEY[d]] as unknown[]) };
  }
  const best: Record<'whole' | 'resent', number> = { whole: Infinity, resent: Infinity };
  for (let rep = 0; rep < REPS; rep++) {
    for (const way of ['whole', 'resent'] as const) {
      const dialect = createDialects()[d];
      const resent = new ResentBody(KEY[d], 64);
      const t0 = performance.now();
      for (const buf of bodies) {
        let json: unknown;
        if (way === 'resent') json = resent.parse(buf);
        else {
          json = JSON.parse(buf.toString('utf8'));
          if (jsonValueDepth(json, 64) > 64) throw new Error('too deep');
        }
        dialect.read(json, ROUTE[d], ctx);
      }
      best[way] = Math.min(best[way], performance.now() - t0);
    }
  }
  figures[`${d}_whole_us_per_call`] = round((best.whole / CALLS) * 1000, 1);
  figures[`${d}_resent_us_per_call`] = round((best.resent / CALLS) * 1000, 1);
  figures[`read_speedup_${d}`] = round(best.whole / best.resent, 2);
  figures[`${d}_last_body_kb`] = round(bodies.at(-1)!.length / 1024, 1);
}
figures.tools_kb = round(Buffer.byteLength(JSON.stringify(tools)) / 1024, 1);
figures.load_avg_1m = round(os.loadavg()[0]!, 2);
report('proxy-read', figures);
