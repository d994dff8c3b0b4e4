/**
 * Where the runtime process's CPU goes per proxied chat call (issue #14): the in-process path of
 * bench/proxy-hops.ts (this process's HTTP client on a harness rollout's proxy socket, keep-alive,
 * growing history; the harness only sleeps) and then the direct `HttpBackend` calls with the same
 * prompt ids, each profiled with the V8 inspector after the warm-up only. Every sample is put in
 * one bucket by the innermost frame of its stack that names a part (the codec's continuation,
 * the proxy's request validation, XState, the fake backend, the bench's own client, ...); what
 * no part names is Node's own (HTTP parsing, socket writes, promise ticks). Figures are ms of CPU
 * per call as sampled (the profiler itself adds some; shares are what to read).
 *
 * With `PROFILE_DIALECTS=chat,responses,anthropic,google` (issue #24) it profiles instead, per
 * dialect, streaming, bench/harness.ts's two sides: the dialect's conversation through a harness
 * rollout's proxy, then the same conversation through bench/_proxy-floor.ts speaking the
 * dialect (after a warm-up of each), with the same buckets plus the dialect's reader and writer
 * and the floor's own code: `<dialect>_ours_<bucket>_ms` against `<dialect>_floor_<bucket>_ms`.
 *
 * Run: npx tsx bench/proxy-profile.ts   (PROXY_BENCH_CALLS, default 300; PROFILE_DIR keeps the
 * .cpuprofile files for Chrome DevTools; PROFILE_DIALECTS as above)
 */
import fs from 'node:fs';
import http from 'node:http';
import { Session } from 'node:inspector/promises';
import os from 'node:os';
import path from 'node:path';
import { HttpBackend } from '../src/llm/http-backend.js';
import { createQwen3Codec } from '../src/llm/qwen3-codec.js';
import { LlmProxy } from '../src/proxy/llm-proxy.js';
import { createRuntime } from '../src/runtime/runtime.js';
import { createSandboxProvider } from '../src/sandbox/index.js';
import { startFakeLlmServer } from '../src/testing/fake-llm-server.js';
import { Conversation } from './_proxy-dialect-client.js';
import { fixedAnswerEngine } from './_proxy-engine.js';
import { startFloorServer, type FloorDialect } from './_proxy-floor.js';
import { report, round } from './stats.js';

const CALLS = Number(process.env.PROXY_BENCH_CALLS ?? 300);
const WARMUP = 30;
const codec = createQwen3Codec();
const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-proxy-profile-'));
fs.chmodSync(stateDir, 0o711);
const { engine, seen } = fixedAnswerEngine(codec);
const proxies: { proxy: LlmProxy; token: string }[] = [];
const listen = LlmProxy.listen.bind(LlmProxy);
LlmProxy.listen = async (o) => {
  const p = await listen(o);
  proxies.push({ proxy: p, token: o.token });
  return p;
};

interface Profile { nodes: { id: number; callFrame: { functionName: string; url: string }; children?: number[] }[]; samples: number[]; timeDeltas: number[] }

/** Buckets, first match from the innermost frame outwards: `function@file-part` (either may be empty). */
const PARTS: [string, string][] = [
  ['@_proxy-floor', 'floor_server'], ['@_proxy-dialect-client', 'bench_client'],
  ['read@proxy/dialects/', 'proxy_dialect_read'], ['write@proxy/dialects/', 'proxy_dialect_write'], ['@proxy/sse', 'proxy_dialect_write'], ['@proxy/dialects/', 'proxy_dialect_other'],
  ['chatCompletion@', 'loop_chat_completion'], ['@trajectory-builder', 'trajectory_builder'], ['@event-hub', 'loop_events'], ['@machines/', 'xstate_machine'],
  ['encodeContinuation@', 'codec_continuation'], ['parseAssistant@', 'codec_parse_answer'], ['sendJson@llm-proxy', 'proxy_write_answer'],
  ['place@segmented-trajectory', 'trajectory_place'], ['addTurn@', 'trajectory_add_turn'], ['safeParse@', 'proxy_zod_request'],
  ['chatMessagesOf@', 'proxy_messages_of'], ['@chat-request-reader', 'proxy_reader_prefix_compare'], ['parse@llm-proxy', 'proxy_json_parse_depth'], ['@llm-proxy', 'proxy_other'],
  ['@http-backend', 'backend_client'], ['@backend-pool', 'backend_pool'], ['@llm-http-server', 'fake_backend'], ['@fake-llm-server', 'fake_backend'],
  ['@proxy-profile', 'bench_client'], ['@harness-steps', 'loop_harness_steps'], ['@sandbox-harness', 'loop_sandbox_harness'], ['@src/runtime/', 'loop_runtime'],
  ['@xstate', 'xstate'],
];
function buckets(p: Profile, calls: number): Record<string, number> {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const out: Record<string, number> = {};
  const special: Record<string, string> = { '(garbage collector)': 'gc', '(idle)': 'idle', '(program)': 'v8_program', dispatch: 'profiler' };
  for (let i = 0; i < p.samples.length; i++) {
    let id: number | undefined = p.samples[i]!;
    let part = special[byId.get(id)!.callFrame.functionName];
    for (; !part && id !== undefined; id = parent.get(id)) {
      const f = byId.get(id)!.callFrame;
      part = PARTS.find(([k]) => { const [fn, file] = k.split('@'); return (!fn || f.functionName === fn) && (!file || f.url.includes(file)); })?.[1];
    }
    const k = part ?? 'node_internals';
    out[k] = (out[k] ?? 0) + (p.timeDeltas[i] ?? 0) / 1000 / calls;
  }
  return out;
}

const cpuMs = (): number => { const u = process.cpuUsage(); return (u.user + u.system) / 1000; };
const session = new Session();
session.connect();
await session.post('Profiler.enable');
await session.post('Profiler.setSamplingInterval', { interval: 200 });
async function stopProfile(name: string): Promise<Profile> {
  const { profile } = await session.post('Profiler.stop');
  if (process.env.PROFILE_DIR) fs.writeFileSync(path.join(process.env.PROFILE_DIR, `${name}.cpuprofile`), JSON.stringify(profile));
  return profile as unknown as Profile;
}

const server = await startFakeLlmServer({ policy: engine, codec });
const provider = createSandboxProvider({ hosts: 1, stateDir: path.join(stateDir, 'p') });
const rt = createRuntime({ codec, backends: [`prorl+${server.url}`], sandboxes: provider, maxIterations: CALLS + 10, retries: { max: 0 } });
const figures: Record<string, number | string | boolean> = {};

/** PROFILE_DIALECTS: per dialect, ours and the floor's streaming conversations, each profiled after its warm-up. */
async function profileDialect(dialect: FloorDialect): Promise<void> {
  const n0 = proxies.length;
  const handle = rt.submit({ data_source: 'harness', instance_id: `profile-${dialect}`, command: 'sleep 600', eval_command: 'true', max_llm_calls: CALLS + 1, max_tokens_total: 10_000_000 } as never);
  while (proxies.length === n0) await new Promise((r) => setTimeout(r, 20));
  const { proxy, token } = proxies.at(-1)!;
  const floorServer = await startFloorServer(server.url, codec, dialect);
  const sides = { ours: new Conversation(dialect, proxy.socketPath, token, WARMUP), floor: new Conversation(dialect, floorServer.socketPath, 'floor', WARMUP) };
  const got: Record<string, Record<string, number>> = {};
  try {
    for (const c of Object.values(sides)) await c.calls(WARMUP);
    for (const [name, c] of Object.entries(sides)) {
      await session.post('Profiler.start');
      await c.calls(CALLS - WARMUP);
      got[name] = buckets(await stopProfile(`${dialect}-${name}`), CALLS - WARMUP);
      figures[`${dialect}_${name}_cpu_per_call_ms`] = round(c.cpu / c.lat.length);
    }
  } finally {
    sides.ours.close();
    sides.floor.close();
    await handle.cancel('measured');
    await handle.result.catch(() => undefined);
    await floorServer.close();
  }
  const { ours, floor } = got as { ours: Record<string, number>; floor: Record<string, number> };
  for (const k of [...new Set([...Object.keys(ours), ...Object.keys(floor)])].sort((a, b) => (ours[b] ?? 0) - (floor[b] ?? 0) - ((ours[a] ?? 0) - (floor[a] ?? 0)))) {
    figures[`${dialect}_ours_${k}_ms`] = round(ours[k] ?? 0);
    figures[`${dialect}_floor_${k}_ms`] = round(floor[k] ?? 0);
  }
}

const PROFILE_DIALECTS = process.env.PROFILE_DIALECTS?.split(',') as FloorDialect[] | undefined;
try {
  if (PROFILE_DIALECTS) {
    for (const d of PROFILE_DIALECTS) await profileDialect(d);
    figures.load_avg_1m = round(os.loadavg()[0]!, 2);
  } else {
  const handle = rt.submit({ data_source: 'harness', instance_id: 'profile', command: 'sleep 600', eval_command: 'true', max_llm_calls: CALLS + 1, max_tokens_total: 10_000_000 } as never);
  while (proxies.length === 0) await new Promise((r) => setTimeout(r, 20));
  const { proxy, token } = proxies[0]!;
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  let messages: unknown[] = [{ role: 'user', content: 'Answer with a fixed sentence.' }];
  let cpu0 = 0;
  for (let i = 0; i < CALLS; i++) {
    if (i === WARMUP) {
      await session.post('Profiler.start');
      cpu0 = cpuMs();
    }
    const body = JSON.stringify({ model: 'rollout-policy', messages, max_tokens: 64 });
    const text = await new Promise<string>((resolve, reject) => {
      const req = http.request({ socketPath: proxy.socketPath, path: '/v1/chat/completions', method: 'POST', agent, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
        const c: Buffer[] = [];
        res.on('data', (d: Buffer) => c.push(d));
        res.on('end', () => (res.statusCode === 200 ? resolve(Buffer.concat(c).toString()) : reject(new Error(`HTTP ${res.statusCode}`))));
      });
      req.on('error', reject);
      req.end(body);
    });
    const m = (JSON.parse(text) as { choices: { message: { content: string } }[] }).choices[0]!.message;
    messages = [...messages, { role: 'assistant', content: m.content }, { role: 'user', content: 'Again.' }];
  }
  const n = CALLS - WARMUP;
  figures.cpu_per_proxied_call_ms = round((cpuMs() - cpu0) / n);
  const proxied = buckets(await stopProfile('proxied'), n);
  agent.destroy();
  await handle.cancel('measured');
  await handle.result.catch(() => undefined);

  const direct = new HttpBackend({ id: 'direct', url: server.url, protocol: 'prorl' });
  const recorded = seen.slice(0, CALLS);
  for (const [i, { promptIds, maxTokens }] of recorded.entries()) {
    if (i === WARMUP) {
      await session.post('Profiler.start');
      cpu0 = cpuMs();
    }
    await direct.generate({ rolloutId: 'direct', instance: { data_source: 'bench', instance_id: 'direct' }, turn: i, promptIds, maxTokens, sampling: { temperature: 1 }, signal: new AbortController().signal }, 60_000);
  }
  figures.cpu_per_direct_call_ms = round((cpuMs() - cpu0) / (recorded.length - WARMUP));
  const directB = buckets(await stopProfile('direct'), recorded.length - WARMUP);
  direct.close();
  for (const k of [...new Set([...Object.keys(proxied), ...Object.keys(directB)])].sort((a, b) => (proxied[b] ?? 0) - (proxied[a] ?? 0))) {
    figures[`proxied_${k}_ms`] = round(proxied[k] ?? 0);
    if (directB[k]) figures[`direct_${k}_ms`] = round(directB[k]);
  }
  figures.load_avg_1m = round(os.loadavg()[0]!, 2);
  }
} finally {
  session.disconnect();
  await rt.close();
  await provider.close();
  await server.close();
  fs.rmSync(stateDir, { recursive: true, force: true });
}
report('proxy-profile', figures);
