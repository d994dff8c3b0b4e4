/**
 * The service's cost over the embedded runtime, and its WebSocket fan-out.
 *
 * 1. process_overhead_*: one runtime behind `rollout serve`'s HTTP layer (in-process, port 0).
 *    Each round runs the same shell rollout twice, alternating which goes first: once through
 *    `runtime.submit()` (embedded) and once through `POST /process` (the ProRL route, result
 *    serialized and parsed) from a keep-alive node:http client. The overhead is the per-round
 *    difference; its p50 and p99 are reported (and the p50 with global fetch as the client). Scripted policy with the real Qwen3 codec; the in-memory sandbox, so the figure is
 *    the HTTP layer and not sandbox noise.
 * 2. ws_events_per_s_200_subscribers: 200 WebSocket firehose subscribers (in a worker thread,
 *    so the clients do not share the server's event loop) while 400 rollouts run; events
 *    delivered per second summed over subscribers. The baseline is the same 400 rollouts with no
 *    subscriber, same run: `rollout_throughput_ratio_200_subscribers` = rollouts/s with 200
 *    subscribers ÷ rollouts/s without (1.0 = watching costs the rollouts nothing).
 */
import { readFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { Worker } from 'node:worker_threads';
import { createQwen3Codec } from '../src/llm/qwen3-codec.js';
import { serviceRuntimeFactory } from '../src/server/runtime-factory.js';
import { createService } from '../src/server/service.js';
import { MemorySandboxProvider } from '../src/testing/memory-sandbox.js';
import { median, quantile, report, round } from './stats.js';

const instance = JSON.parse(readFileSync(new URL('../examples/shell.jsonl', import.meta.url), 'utf8').split('\n')[0]!) as Record<string, unknown>;
const sampling = { max_iterations: 6 };

const service = createService(
  {
    createRuntime: serviceRuntimeFactory({ codec: createQwen3Codec(), sandboxes: () => new MemorySandboxProvider(), retainEvents: 50_000 }),
    backends: [{ address: 'oracle' }],
  },
  { port: 0, backendsIntervalMs: 0 },
);
const url = await service.listen();
const rt = service.runtime!;

// --- 1. /process overhead ------------------------------------------------------------------
async function embedded(): Promise<number> {
  const t0 = performance.now();
  const r = await rt.submit(instance, sampling).result;
  if (r.outcome !== 'completed') throw new Error(`embedded rollout ${r.outcome}`);
  return performance.now() - t0;
}
// A keep-alive node:http client, as a trainer's session would be; global fetch (undici) adds
// ~0.3 ms per request of its own on this machine, reported separately.
const agent = new Agent({ keepAlive: true, maxSockets: 1 });
const base = new URL(url);
function post(path: string, body: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: base.hostname, port: base.port, path, method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (text += d));
        res.on('end', () => resolve(text));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}
async function viaHttp(): Promise<number> {
  const t0 = performance.now();
  const body = JSON.parse(await post('/process', JSON.stringify({ instance, sampling_params: sampling }))) as { outcome: string };
  if (body.outcome !== 'completed') throw new Error(`/process rollout ${body.outcome}`);
  return performance.now() - t0;
}
async function viaFetch(): Promise<number> {
  const t0 = performance.now();
  const res = await fetch(`${url}/process`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ instance, sampling_params: sampling }) });
  const body = (await res.json()) as { outcome: string };
  if (body.outcome !== 'completed') throw new Error(`/process rollout ${body.outcome}`);
  return performance.now() - t0;
}
for (let i = 0; i < 30; i++) await Promise.all([embedded(), viaHttp()]); // warm-up (JIT, keep-alive)
const ROUNDS = 300;
const emb: number[] = [];
const http: number[] = [];
const diff: number[] = [];
const fetchDiff: number[] = [];
for (let i = 0; i < 100; i++) {
  const e = await embedded();
  fetchDiff.push((await viaFetch()) - e);
}
for (let i = 0; i < ROUNDS; i++) {
  let e: number;
  let h: number;
  if (i % 2 === 0) {
    e = await embedded();
    h = await viaHttp();
  } else {
    h = await viaHttp();
    e = await embedded();
  }
  emb.push(e);
  http.push(h);
  diff.push(h - e);
}

// --- 2. WebSocket fan-out --------------------------------------------------------------------
const SUBSCRIBERS = 200;
const ROLLOUTS = 400;

async function burst(): Promise<number> {
  const t0 = performance.now();
  await Promise.all(Array.from({ length: ROLLOUTS }, () => rt.submit(instance, sampling).result));
  return performance.now() - t0;
}

const baselineMs = median([await burst(), await burst(), await burst()]);

const clientCode = `
const { parentPort, workerData } = require('node:worker_threads');
const { WebSocket } = require(workerData.ws);
const conns = [];
let events = 0, results = 0, gaps = 0, ready = 0;
for (let i = 0; i < workerData.n; i++) {
  const ws = new WebSocket(workerData.url);
  ws.on('message', (data) => {
    const s = data.toString();
    if (s.startsWith('{"type":"event"')) { events++; if (s.includes('"type":"rollout.result"')) { results++; if (results === workerData.target) parentPort.postMessage({ done: true, events, gaps }); } }
    else if (s.startsWith('{"type":"gap"')) gaps++;
    else if (s.startsWith('{"type":"hello"')) ws.send(JSON.stringify({ type: 'subscribe' }));
    else if (s.startsWith('{"type":"subscribed"') && ++ready === workerData.n) parentPort.postMessage({ ready: true });
  });
  conns.push(ws);
}
parentPort.on('message', (m) => { if (m === 'reset') { events = 0; results = 0; gaps = 0; } if (m === 'close') { for (const c of conns) c.terminate(); parentPort.close(); } });
`;
const worker = new Worker(clientCode, {
  eval: true,
  workerData: { url: url.replace('http', 'ws') + '/v1/events', n: SUBSCRIBERS, ws: import.meta.resolve('ws').replace('file://', '').replace(/\/wrapper\.mjs$/, '/index.js'), target: SUBSCRIBERS * ROLLOUTS },
});
await new Promise<void>((resolve) => worker.on('message', (m: { ready?: boolean }) => m.ready && resolve()));
const t0 = performance.now();
const doneMsg = new Promise<{ events: number; gaps: number }>((resolve) => worker.on('message', (m: { done?: boolean; events: number; gaps: number }) => m.done && resolve(m)));
const rolloutsMs = await burst();
const delivered = await doneMsg;
const fanoutMs = performance.now() - t0;
console.log(`delivered ${delivered.events} events in ${round(fanoutMs, 1)} ms; rollouts took ${round(rolloutsMs, 1)} ms`);
worker.postMessage('close');
await new Promise((r) => worker.once('exit', r));
agent.destroy();
await service.close();

report('service', {
  process_overhead_p50_ms: round(quantile(diff, 0.5), 3),
  process_overhead_p99_ms: round(quantile(diff, 0.99), 3),
  embedded_rollout_p50_ms: round(median(emb), 3),
  process_rollout_p50_ms: round(median(http), 3),
  process_rollout_ratio_p50: round(median(http) / median(emb), 3),
  process_overhead_fetch_client_p50_ms: round(median(fetchDiff), 3),
  ws_events_per_s_200_subscribers: Math.round(delivered.events / (fanoutMs / 1000)),
  ws_gaps_200_subscribers: delivered.gaps,
  rollouts_per_s_0_subscribers: round(ROLLOUTS / (baselineMs / 1000), 1),
  rollouts_per_s_200_subscribers: round(ROLLOUTS / (rolloutsMs / 1000), 1),
  rollout_throughput_ratio_200_subscribers: round(baselineMs / rolloutsMs, 3),
});
