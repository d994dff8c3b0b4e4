import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';

/**
 * The real engine (`rollout llm-serve --tiny`) and the service (`rollout serve`) as child
 * processes: their start-up banners, the engine's slots sizing `rollout run`'s concurrency, and a
 * dead backend shown down in /v1/backends, /status and /metrics (#16.3, #16.4).
 */

const repo = fileURLToPath(new URL('../../../', import.meta.url));
const bin = join(repo, 'bin', 'rollout.js');
const spawned: ChildProcess[] = [];
let dir: string;

/** Starts a `rollout` server command; resolves with its URL once `untilLine` has been printed. */
function start(args: string[], untilLine: RegExp): Promise<{ url: string; out: () => string; err: () => string }> {
  const proc = spawn(process.execPath, [bin, ...args], { cwd: repo, stdio: ['ignore', 'pipe', 'pipe'] });
  spawned.push(proc);
  let out = '';
  let err = '';
  proc.stderr?.on('data', (d: Buffer) => (err += d.toString()));
  return new Promise((res, rej) => {
    proc.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
      const url = /listening on (http:\/\/\S+)/.exec(out)?.[1];
      if (url && untilLine.test(out)) res({ url, out: () => out, err: () => err });
    });
    proc.once('exit', (code) => rej(new Error(`rollout ${args[0]} exited ${code}: ${out}${err}`)));
  });
}

/** A port nothing listens on (bound, then released). */
/**
 * A backend address nothing answers at: every connection is reset. The port stays held until
 * `close`: a port closed and left free could be taken by another process's server (a second
 * suite on the machine) while the test waits for the backend to be marked down.
 */
async function deadBackend(): Promise<{ url: string; close(): Promise<void> }> {
  const srv = createServer((socket) => socket.resetAndDestroy());
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  return { url: `http://127.0.0.1:${port}`, close: () => new Promise((r) => srv.close(() => r())) };
}

let engine: { url: string; out: () => string };

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'rr-banners-'));
  engine = await start(['llm-serve', '--tiny', '--parallel', '3', '--port', '0'], /use it .*\n/);
}, 180_000);

afterAll(async () => {
  await Promise.all(
    spawned.map(async (p) => {
      if (p.exitCode !== null || p.signalCode !== null) return;
      const gone = new Promise((r) => p.once('exit', r));
      p.kill('SIGTERM');
      await gone;
    }),
  );
  rmSync(dir, { recursive: true, force: true });
});

describe('rollout llm-serve', { timeout: 180_000 }, () => {
  it('prints a banner with the model, its addresses per protocol, its slots and how to use it', () => {
    const host = new URL(engine.url).host;
    const out = engine.out();
    expect(out).toMatch(/^\s+model\s+\S+\.gguf \(tiny random weights, Qwen3 vocabulary\)$/m);
    expect(out).toContain(`vllm+http://${host}`);
    expect(out).toContain(`sglang+http://${host}`);
    expect(out).toMatch(/^\s+slots\s+3 requests at once/m);
    expect(out).toMatch(new RegExp(`^\\s+use it\\s+rollout run TASKS.jsonl --backend prorl\\+http://${host}$`, 'm'));
  });

  it('reports its slots at GET /props, as llama.cpp does', async () => {
    const props = (await (await fetch(`${engine.url}/props`)).json()) as { total_slots: number };
    expect(props.total_slots).toBe(3);
  });
});

describe('rollout run against the real engine', { timeout: 180_000 }, () => {
  it("sizes its concurrency to the engine's slots when --concurrency is not given, and says so", async () => {
    const tasks = join(dir, 'one.jsonl');
    writeFileSync(tasks, `${JSON.stringify({ data_source: 'math', instance_id: 'q', problem: '1+1?', answer: '2' })}\n`);
    const host = new URL(engine.url).host;
    const r = await new Promise<{ code: number; stderr: string }>((res) => {
      execFile(
        process.execPath,
        [bin, 'run', tasks, '--backend', `vllm+http://${host}`, '--max-iterations', '1', '--max-tokens', '4', '--sandbox', 'none', '--out', join(dir, 'run-out')],
        { cwd: dir, timeout: 170_000 },
        (err, _stdout, stderr) => res({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stderr }),
      );
    });
    expect(r.stderr).toContain("concurrency 3 (the engines' slots (3); --concurrency N to change)");
    expect(r.code).toBe(0);
  });
});

describe('rollout serve', { timeout: 180_000 }, () => {
  it('prints a banner, and shows a dead backend down (degraded, not probing forever) in /v1/backends, /status and /metrics', async () => {
    const host = new URL(engine.url).host;
    const deadServer = await deadBackend();
    onTestFinished(() => deadServer.close());
    const dead = deadServer.url;
    const serve = await start(['serve', '--port', '0', '--sandbox', 'none', '--backend', `vllm+http://${host}`, '--backend', dead], /^\s+sandbox .*\n/m);
    const out = serve.out();
    expect(out).toMatch(new RegExp(`^\\s+visualizer\\s+${serve.url}/visualizer$`, 'm'));
    expect(out).toMatch(new RegExp(`^\\s+backends\\s+vllm\\+http://${host} \\(3 slots\\), ${dead} \\(down: cannot reach`, 'm'));
    expect(out).toMatch(/^\s+model\s+\S+\.gguf; tokenizer Qwen3 \(default\)$/m);
    expect(out).toMatch(/^\s+sandbox\s+none \(requested\)$/m);
    expect(serve.err()).toMatch(/FAIL\s+backend http:\/\/127\.0\.0\.1:\d+ cannot reach/);

    // Down after failureThreshold (2) probes 5 s apart; the poll bound leaves room for a loaded machine.
    await expect
      .poll(async () => ((await (await fetch(`${serve.url}/v1/backends`)).json()) as { backends: { url: string; state: string }[] }).backends.map((b) => b.state).sort(), { timeout: 30_000, interval: 250 })
      .toEqual(['degraded', 'healthy']);
    const status = (await (await fetch(`${serve.url}/status`)).json()) as { llm_servers_down: string[] };
    expect(status.llm_servers_down).toHaveLength(1);
    expect(status.llm_servers_down[0]).toContain(dead.replace('http://', ''));
    const metrics = await (await fetch(`${serve.url}/metrics`)).text();
    expect(metrics.match(/^rollout_backend_down\{backend="[^"]+"\} (\d)$/gm)?.map((l) => l.at(-1)).sort()).toEqual(['0', '1']);
  });
});
