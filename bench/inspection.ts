/**
 * What watching costs.
 *
 * 1. `rollouts_per_s_off`: the runtime (scripted policy, no-op sandbox, 3-turn rollouts, 200 in
 *    flight) with no `inspect` option: the baseline, measured in the same process.
 * 2. `rollouts_per_s_inspect`: the same with `createInspector(url)` as `inspect`, sending every
 *    XState inspection event to a local WebSocket sink (a `ws` server that counts frames); the
 *    time includes converting and sending every event the run produced.
 *    `inspect_ratio` = inspect / off. Inspection is a debugging tool; this says how much it costs.
 * 3. `store_events_per_s`: the visualizer's model (visualizer/store.js) folding recorded events,
 *    i.e. the page's per-event work before any rendering.
 * Medians of 3 alternating runs.
 */
import { WebSocketServer } from 'ws';
import { createRuntime } from '../src/index.js';
import { createInspector } from '../src/runtime/inspection.js';
import { createTestHandler, ScriptedPolicy, TestCodec } from '../src/testing/index.js';
import { median, report, round } from './stats.js';
import { benchRuntime, benchTask, keepInFlight, noopProvider, oracle } from './fixtures.js';

const TOTAL = Number(process.env.INSPECT_TOTAL ?? 2_000);
const IN_FLIGHT = 200;
const RUNS = 3;




// The sink: counts frames, as Stately's bridge would receive them.
const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
await new Promise<void>((r) => wss.once('listening', () => r()));
let framesReceived = 0;
wss.on('connection', (ws) => ws.on('message', () => framesReceived++));
const address = wss.address();
if (address === null || typeof address === 'string') throw new Error('no port');
const sinkUrl = `ws://127.0.0.1:${address.port}`;

let sent = 0;
let dropped = 0;
async function throughput(inspect: boolean): Promise<number> {
  let inspector = null;
  if (inspect) {
    const connected = new Promise<void>((r) => wss.once('connection', () => r()));
    inspector = createInspector(sinkUrl, { maxDeferredEvents: 1_000_000 });
    await connected;
  }
  const rt = benchRuntime(IN_FLIGHT, inspector ? { inspect: inspector.inspect } : {});
  const t0 = performance.now();
  await keepInFlight(TOTAL, IN_FLIGHT, () => rt.submit(benchTask).result);
  if (inspector) {
    // @statelyai/inspect converts each event on a setTimeout(0); with a zero-latency policy the
    // run is one long chain of promise jobs and most conversions run after it. Count them:
    // a timer set now fires after every conversion already scheduled.
    await new Promise((r) => setTimeout(r, 0));
  }
  const per = TOTAL / ((performance.now() - t0) / 1000);
  await rt.close();
  if (inspector) {
    const st = inspector.stats();
    sent += st.sent;
    dropped += st.dropped;
    await inspector.close();
  }
  return per;
}

const off: number[] = [];
const on: number[] = [];
await throughput(false);
await throughput(true);
sent = 0;
dropped = 0;
for (let i = 0; i < RUNS; i++) {
  if (i % 2 === 0) {
    off.push(await throughput(false));
    on.push(await throughput(true));
  } else {
    on.push(await throughput(true));
    off.push(await throughput(false));
  }
}

// The page's model, fed the events of a real run (recorded from the runtime's event stream).
const codec = new TestCodec();
const rt = createRuntime({ codec, llm: new ScriptedPolicy({ codec }), sandboxes: noopProvider, handlers: [createTestHandler()], events: { retain: 100_000 } });
await Promise.all(Array.from({ length: 500 }, () => rt.submit({ data_source: 'scripted', oracle }).result));
const recorded: unknown[] = [];
{
  const ac = new AbortController();
  const it = rt.events({ after: 0, signal: ac.signal })[Symbol.asyncIterator]();
  for (;;) {
    const r = await Promise.race([it.next(), new Promise<null>((res) => setImmediate(() => res(null)))]);
    if (!r || r.done) break;
    recorded.push({ type: 'event', sub: 'viz', event: r.value });
  }
  ac.abort();
}
await rt.close();
const { Store } = (await import('../visualizer/store.js' as string)) as { Store: new () => { apply(m: unknown): unknown } };
const storeRuns: number[] = [];
for (let i = 0; i < 5; i++) {
  const store = new Store();
  const t0 = performance.now();
  for (const m of recorded) store.apply(m);
  storeRuns.push(recorded.length / ((performance.now() - t0) / 1000));
}

for (const ws of wss.clients) ws.terminate();
await new Promise<void>((r) => wss.close(() => r()));

const offMed = median(off);
const onMed = median(on);
report('inspection', {
  rollouts_per_s_off: round(offMed, 0),
  rollouts_per_s_inspect: round(onMed, 0),
  inspect_ratio: round(onMed / offMed, 3),
  inspection_frames_per_rollout: round(sent / (TOTAL * RUNS), 1),
  inspection_frames_dropped: dropped,
  sink_frames_received: framesReceived,
  store_events: recorded.length,
  store_events_per_s: round(median(storeRuns), 0),
});
