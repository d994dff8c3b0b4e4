/**
 * Where the LLM proxy's per-call overhead goes (issue #14): a diagnostic companion of
 * bench/proxy.ts that times the same growing-history chat calls over each hop of the path, all in
 * one run against the same fake token-level backend (in this process, fixed 24-token answer):
 *
 * - `inproc_*`: this process's own HTTP client straight to a harness rollout's proxy socket (the
 *   harness only sleeps): the proxy, the loop and the backend on one event loop, no sandbox, no
 *   Python; against `HttpBackend` calls with the prompts that run recorded. The 10th percentiles
 *   are less swayed by other load on a shared machine.
 * - `direct_node_p50_ms`: this process → backend (`HttpBackend.generate`, the recorded prompt
 *   ids: bench/proxy.ts's baseline);
 * - `direct_python_p50_ms`: python3 on the host → backend (`/generate`, the same ids): what the
 *   Python client itself costs compared with Node's;
 * - `proxied_tcp_p50_ms`: the harness in the sandbox → loopback listener (sandbox netns) →
 *   sandbox host → proxy Unix socket → loop → backend (the path bench/proxy.ts measures);
 * - `proxied_uds_p50_ms`: the harness in the sandbox → the proxy's Unix socket directly
 *   (/run/rollout/llm.sock) → loop → backend: the same minus the loopback listener's hop;
 * - `proxy_service_p50_ms`: inside this process, from the proxy's `request` event to its answer's
 *   `finish`;
 * - `cpu_*_per_*_call_ms`: CPU time per call of this process, of the sandbox host (from /proc,
 *   10 ms ticks) and of the Python client (its timed part): unlike latencies, barely moved by
 *   other load.
 *
 * - `host_python_*`: the same Python timing harness as a host process on the proxy's socket (no
 *   sandbox around it); `host_python_overhead_ms` is its p50 minus `inproc_direct_p50_ms`.
 * - `floor_*`: that harness against bench/_proxy-floor.ts, a bare node:http server that only
 *   parses the body, encodes the continuation and makes the backend call: `floor_overhead_ms`
 *   (its p50 minus direct calls with its own prompts) is what any proxy on node:http pays on this
 *   machine, to read `host_python_overhead_ms` against.
 *
 * HOPS_INPROC_ONLY=1 runs the in-process part alone (seconds; no sandbox is used by it).
 * Run: npx tsx bench/proxy-hops.ts   (PROXY_BENCH_CALLS, default 200)
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { createRuntime } from '../src/runtime/runtime.js';
import { createQwen3Codec } from '../src/llm/qwen3-codec.js';
import { LlmProxy } from '../src/proxy/llm-proxy.js';
import { createSandboxProvider } from '../src/sandbox/index.js';
import { startFakeLlmServer } from '../src/testing/fake-llm-server.js';
import { cpuMs, DirectCalls } from './_direct-calls.js';
import { startFloorServer } from './_proxy-floor.js';
import { fixedAnswerEngine } from './_proxy-engine.js';
import { TIMING_AGENT, timingLine } from './_proxy-timing-agent.js';
import { median, quantile, report, round } from './stats.js';

const CALLS = Number(process.env.PROXY_BENCH_CALLS ?? 200);
const WARMUP = 30;
const figures: Record<string, number | string | boolean> = {};
const codec = createQwen3Codec();
const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-proxy-hops-'));
fs.chmodSync(stateDir, 0o711);


/** python3 on the host replaying the recorded prompts straight to the backend's `/generate`. */
const DIRECT_PY = `
import http.client, json, sys, time, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1]); warmup = int(sys.argv[3])
calls = json.load(open(sys.argv[2]))
conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
lat = []
cpu = []
for c in calls:
    body = json.dumps({"prompt_ids": c["promptIds"], "max_tokens": c["maxTokens"], "temperature": 1})
    c0 = time.process_time()
    t = time.perf_counter()
    conn.request("POST", "/generate", body, {"Content-Type": "application/json"})
    r = conn.getresponse(); data = r.read()
    lat.append((time.perf_counter() - t) * 1000)
    cpu.append((time.process_time() - c0) * 1000)
    json.loads(data)
kept = sorted(lat[warmup:])
print(json.dumps({"p50": (kept[(len(kept) - 1) // 2] + kept[len(kept) // 2]) / 2, "cpu": sum(cpu[warmup:]) / len(kept)}))
`;

const { engine, seen } = fixedAnswerEngine(codec);

/** CPU seconds (user + system) of a process, from /proc (10 ms ticks). */
function procCpuMs(pid: number): number {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
}

// Times each proxy request inside this process, from arrival to the answer's last byte handed to the socket.
const service: number[] = [];
const proto = LlmProxy.prototype as unknown as { route(req: IncomingMessage, res: ServerResponse): void };
const route = proto.route;
/** CPU of this process and of the sandbox host at the WARMUP-th request's arrival and at the last answer's finish. */
const cpuWindow = { n: 0, main0: 0, host0: 0, main1: 0, host1: 0 };
const hostCpu = (): number => { const pid = provider.hostPids()[0]; return pid ? procCpuMs(pid) : NaN; };
proto.route = function (this: unknown, req: IncomingMessage, res: ServerResponse) {
  const t = performance.now();
  if (++cpuWindow.n === WARMUP + 1) Object.assign(cpuWindow, { main0: cpuMs(), host0: hostCpu() });
  res.once('finish', () => Object.assign(cpuWindow, { main1: cpuMs(), host1: hostCpu() }));
  res.once('finish', () => service.push(performance.now() - t));
  return route.call(this, req, res);
};

/** The same host Python harness against the floor server (bench/_proxy-floor.ts), then its prompts replayed direct. */
async function floorRun(): Promise<{ p50: number; direct: number }> {
  const floor = await startFloorServer(server.url, codec);
  try {
    const out = await runPython(['-c', TIMING_AGENT, String(CALLS), String(WARMUP), 'uds'], { OPENAI_BASE_URL: 'http://localhost/v1', OPENAI_API_KEY: 'floor', LLM_SOCKET: floor.socketPath });
    const lat = timingLine(out, 'floor');
    return { p50: lat.p50, direct: (await directNode(floor.recorded)).p50 };
  } finally {
    await floor.close();
  }
}

function runPython(args: string[], env: Record<string, string>): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    const p = spawn('python3', args, { env: { ...process.env, ...env } });
    let o = '';
    p.stdout.on('data', (d: Buffer) => (o += d));
    p.stderr.on('data', (d: Buffer) => process.stderr.write(d));
    p.on('close', (code) => (code === 0 ? resolve(o) : reject(new Error(`python3 exited ${code}: ${o.slice(-500)}`))));
  });
}

/** The proxies started (a harness's), with their tokens, for the in-process client below. */
const proxies: { proxy: LlmProxy; token: string }[] = [];
const listen = LlmProxy.listen.bind(LlmProxy);
LlmProxy.listen = async (o) => {
  const proxy = await listen(o);
  proxies.push({ proxy, token: o.token });
  return proxy;
};

/**
 * The in-process hop: this process's own HTTP client (keep-alive, the same growing history)
 * straight to a harness rollout's proxy socket; the harness only sleeps. No sandbox, no Python:
 * both ends are on this event loop, so the latency is this process's own work per call.
 */
async function inProcess(): Promise<{ p50: number; p10: number; cpu: number; recorded: typeof seen; hostPy: { p50: number; cpu: number }; floor: { p50: number; direct: number } }> {
  seen.length = 0;
  const n = proxies.length;
  const handle = rt.submit({ data_source: 'harness', instance_id: 'hops-node', command: 'sleep 600', eval_command: 'true', max_llm_calls: 2 * CALLS + 1, max_tokens_total: 10_000_000 } as never);
  while (proxies.length === n) await new Promise((r) => setTimeout(r, 20));
  const { proxy, token } = proxies.at(-1)!;
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  let messages: unknown[] = [{ role: 'user', content: 'Answer with a fixed sentence.' }];
  const lat: number[] = [];
  let cpu0 = 0;
  for (let i = 0; i < CALLS; i++) {
    if (i === WARMUP) cpu0 = cpuMs();
    const body = JSON.stringify({ model: 'rollout-policy', messages, max_tokens: 64 });
    const t = performance.now();
    const text = await new Promise<string>((resolve, reject) => {
      const req = http.request({ socketPath: proxy.socketPath, path: '/v1/chat/completions', method: 'POST', agent, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
        const c: Buffer[] = [];
        res.on('data', (d: Buffer) => c.push(d));
        res.on('end', () => (res.statusCode === 200 ? resolve(Buffer.concat(c).toString()) : reject(new Error(`HTTP ${res.statusCode}: ${Buffer.concat(c).toString().slice(0, 300)}`))));
      });
      req.on('error', reject);
      req.end(body);
    });
    if (i >= WARMUP) lat.push(performance.now() - t);
    const m = (JSON.parse(text) as { choices: { message: { content: string } }[] }).choices[0]!.message;
    messages = [...messages, { role: 'assistant', content: m.content }, { role: 'user', content: 'Again.' }];
  }
  const cpu = (cpuMs() - cpu0) / (CALLS - WARMUP);
  agent.destroy();
  const recorded = seen.slice();
  // The timing harness as a plain host process on the same proxy socket (its own conversation: a
  // new segment): the Python client without the sandbox around it.
  const out = await runPython(['-c', TIMING_AGENT, String(CALLS), String(WARMUP), 'uds'], { OPENAI_BASE_URL: 'http://localhost/v1', OPENAI_API_KEY: token, LLM_SOCKET: proxy.socketPath });
  const hostPy = timingLine(out, 'host python');
  const floor = await floorRun();
  await handle.cancel('measured');
  await handle.result.catch(() => undefined);
  return { p50: median(lat), p10: quantile(lat, 0.1), cpu, recorded, hostPy, floor };
}

const server = await startFakeLlmServer({ policy: engine, codec });
const provider = createSandboxProvider({ hosts: 1, stateDir: path.join(stateDir, 'p') });
const rt = createRuntime({ codec, backends: [`prorl+${server.url}`], sandboxes: provider, maxIterations: CALLS + 10, retries: { max: 0 } });

async function proxied(mode: 'tcp' | 'uds'): Promise<{ p50: number; service: number; pyCpu: number; mainCpu: number; hostCpu: number }> {
  seen.length = 0;
  service.length = 0;
  cpuWindow.n = 0;
  const result = await rt.submit({
    data_source: 'harness',
    instance_id: `hops-${mode}`,
    command: `python3 timing_agent.py ${CALLS} ${WARMUP} ${mode}`,
    files: { 'timing_agent.py': TIMING_AGENT },
    eval_command: 'true',
    max_llm_calls: CALLS + 1,
    max_tokens_total: 10_000_000,
  } as never).result;
  const measured = CALLS - WARMUP;
  const mainCpu = (cpuWindow.main1 - cpuWindow.main0) / measured;
  const hostCpuPerCall = (cpuWindow.host1 - cpuWindow.host0) / measured;
  const out = String(result.evalDetails?.harness_output ?? '');
  const lat = timingLine(out, `${mode} (outcome ${result.outcome})`);
  return { p50: lat.p50, service: median(service.slice(WARMUP)), pyCpu: lat.cpu, mainCpu, hostCpu: hostCpuPerCall };
}

/** This process → the backend, the recorded prompts in order (bench/proxy.ts's direct call). */
async function directNode(recorded: typeof seen): Promise<{ p50: number; p10: number; cpu: number }> {
  const direct = new DirectCalls(server.url);
  try {
    await direct.run(recorded.slice(0, WARMUP));
    const { lat, cpu } = await direct.run(recorded.slice(WARMUP));
    return { p50: median(lat), p10: quantile(lat, 0.1), cpu: cpu / lat.length };
  } finally {
    direct.close();
  }
}

try {
  const node = await inProcess();
  const nodeDirect = await directNode(node.recorded);
  figures.inproc_proxied_p50_ms = round(node.p50, 3);
  figures.inproc_direct_p50_ms = round(nodeDirect.p50, 3);
  figures.inproc_overhead_p50_ms = round(node.p50 - nodeDirect.p50, 3);
  // The 10th percentiles: less swayed by other load on a shared machine (the work itself).
  figures.inproc_proxied_p10_ms = round(node.p10, 3);
  figures.inproc_direct_p10_ms = round(nodeDirect.p10, 3);
  figures.inproc_cpu_per_proxied_call_ms = round(node.cpu, 3);
  figures.inproc_cpu_per_direct_call_ms = round(nodeDirect.cpu, 3);
  // The sandbox's harness, run on the host against the same proxy: what the sandbox around Python costs.
  figures.host_python_proxied_p50_ms = round(node.hostPy.p50, 3);
  figures.cpu_python_per_host_proxied_call_ms = round(node.hostPy.cpu, 3);
  // Host Python over a Unix socket, ours against the floor (bench/_proxy-floor.ts), each minus direct calls with its own prompts.
  figures.host_python_overhead_ms = round(node.hostPy.p50 - nodeDirect.p50, 3);
  figures.floor_host_python_p50_ms = round(node.floor.p50, 3);
  figures.floor_overhead_ms = round(node.floor.p50 - node.floor.direct, 3);
  if (process.env.HOPS_INPROC_ONLY) throw new Error('done');
  const tcp = await proxied('tcp');
  const recorded = seen.slice();
  const uds = await proxied('uds');
  const d = await directNode(recorded);
  const directCpu = d.cpu;
  const callsFile = path.join(stateDir, 'calls.json');
  fs.writeFileSync(callsFile, JSON.stringify(recorded));
  // Asynchronously: the backend answers from this process's event loop.
  const py = await new Promise<string>((resolve, reject) => {
    const p = spawn('python3', ['-c', DIRECT_PY, server.url, callsFile, String(WARMUP)]);
    let o = '';
    p.stdout.on('data', (d: Buffer) => (o += d));
    p.stderr.on('data', (d: Buffer) => process.stderr.write(d));
    p.on('close', (code) => (code === 0 ? resolve(o) : reject(new Error(`direct python exited ${code}`))));
  });
  const dn = d.p50;
  figures.direct_node_p50_ms = round(dn, 3);
  figures.direct_python_p50_ms = round((JSON.parse(py) as { p50: number }).p50, 3);
  figures.proxied_tcp_p50_ms = round(tcp.p50, 3);
  figures.proxied_uds_p50_ms = round(uds.p50, 3);
  figures.proxy_service_p50_ms = round(tcp.service, 3);
  figures.proxy_service_uds_p50_ms = round(uds.service, 3);
  figures.overhead_tcp_ms = round(tcp.p50 - dn, 3);
  figures.listener_hop_ms = round(tcp.p50 - uds.p50, 3);
  figures.in_process_overhead_ms = round(tcp.service - dn, 3);
  const dp = JSON.parse(py) as { cpu: number };
  // CPU per call (load-independent, unlike the latencies): main = this process (proxy, loop, backend); host = the sandbox host (the listener's forwarding, the harness's shell polls).
  figures.cpu_main_per_proxied_call_ms = round(tcp.mainCpu, 3);
  figures.cpu_main_per_proxied_uds_call_ms = round(uds.mainCpu, 3);
  figures.cpu_main_per_direct_call_ms = round(directCpu, 3);
  figures.cpu_host_per_proxied_call_ms = round(tcp.hostCpu, 3);
  figures.cpu_host_per_proxied_uds_call_ms = round(uds.hostCpu, 3);
  figures.cpu_python_per_proxied_call_ms = round(tcp.pyCpu, 3);
  figures.cpu_python_per_proxied_uds_call_ms = round(uds.pyCpu, 3);
  figures.cpu_python_per_direct_call_ms = round(dp.cpu, 3);
  figures.load_avg_1m = round(os.loadavg()[0]!, 2);
} catch (e) {
  if ((e as Error).message !== 'done') throw e;
} finally {
  await rt.close();
  await provider.close();
  await server.close();
  fs.rmSync(stateDir, { recursive: true, force: true });
}
report('proxy-hops', figures);
