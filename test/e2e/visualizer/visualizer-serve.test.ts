import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import { chromiumMissing, launchBrowser, type TestBrowser } from './browser.js';

// The page against the real thing: `rollout fake-llm` and `rollout serve` as child processes,
// a batch submitted over HTTP, the page watching over the service's WebSocket.

const BIN = resolve('bin/rollout.js');
const INSTANCES = 3;
const N = 2;

let dir: string;
let browser: TestBrowser | null = null;
const children: ChildProcess[] = [];

/** Starts `rollout <args>` and resolves with the URL it prints once listening. */
async function start(args: string[]): Promise<string> {
  const child = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let out = '';
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  return new Promise<string>((resolveUrl, reject) => {
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) resolveUrl(m[1]!);
    });
    child.once('exit', (code) => reject(new Error(`rollout ${args[0]} exited ${code}: ${err}`)));
  });
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(timer);
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'viz-serve-'));
});

afterAll(async () => {
  await browser?.close();
  for (const c of children.reverse()) await stop(c);
  await rm(dir, { recursive: true, force: true });
});

describe('visualizer on rollout serve with rollout fake-llm', () => {
  it.skipIf(chromiumMissing())('fills the table from a batch, highlights a rollout state in its graph and replays its bash output', async () => {
    const instances = Array.from({ length: INSTANCES }, (_, i) => ({
      data_source: 'shell',
      instance_id: `viz-${i}`,
      prompt: `Print probe ${i}.`,
      eval_command: 'true',
      oracle: [
        { tool_calls: [{ name: 'execute_bash', arguments: { command: `echo visualizer-probe-${i}` } }] },
        { tool_calls: [{ name: 'finish', arguments: {} }] },
      ],
    }));
    const tasks = join(dir, 'tasks.jsonl');
    await writeFile(tasks, instances.map((t) => JSON.stringify(t)).join('\n') + '\n');
    const llm = await start(['fake-llm', '--tasks', tasks, '--latency-ms', '100']);
    // A real sandbox (bwrap where present): the terminal replay shows what bash actually printed.
    const api = await start(['serve', '--port', '0', '--backend', llm, '--sandbox', 'auto', '--state-dir', dir]);

    browser = await launchBrowser();
    const page = browser.page;
    await page.goto(`${api}/visualizer`);
    await page.waitForFunction(() => document.querySelector('#conn')?.getAttribute('data-state') === 'open');

    const res = await fetch(`${api}/v1/batches`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ instances, n: N }) });
    expect(res.status).toBeLessThan(300);
    const batch = (await res.json()) as { rollout_ids: string[] };
    expect(batch.rollout_ids).toHaveLength(INSTANCES * N);

    await page.waitForFunction((n) => document.querySelector('#row-count')?.getAttribute('data-total') === String(n), INSTANCES * N);
    const id = batch.rollout_ids[0]!;
    await page.locator(`.rows .row[data-id="${id}"]`).click();
    await page.waitForSelector(`#detail[data-rollout="${id}"] #graph .node.current`);
    // Whatever state the rollout is in when looked at, the graph's highlighted node is that state.
    const [highlighted, state] = await page.evaluate(() => {
      const node = document.querySelector('#graph .node.current');
      const v = (window as unknown as { __viz: { store: { rollouts: Map<string, { state: string }> }; selectedId: string } }).__viz;
      return [node?.getAttribute('data-state') ?? null, v.store.rollouts.get(v.selectedId)?.state ?? null];
    });
    expect(highlighted?.split('.').at(-1)).toBe(state);

    await page.waitForSelector('#graph .node.current[data-state="done"]', { timeout: 60_000 });
    await expect.poll(() => page.innerText('#terminal .term-pane'), { timeout: 10_000 }).toMatch(/\$ echo visualizer-probe-0\nvisualizer-probe-0/);
    await page.waitForFunction((n) => document.querySelectorAll('.rows .row .outcome-completed').length === n, INSTANCES * N, { timeout: 60_000 });

    const out = resolve('test-output');
    await mkdir(out, { recursive: true });
    const shot = join(out, 'visualizer.png');
    await page.screenshot({ path: shot });
    console.log(`[visualizer] screenshot: ${shot}`);
    expect(browser.errors).toEqual([]);
    // Two servers under tsx, a browser and six bwrap sandboxes: generous under a loaded machine
    // (measured: 90 s at a load average of 23 on 2 cores).
  }, 180_000);

  it('sends XState inspection events of its rollouts to the --inspect URL', async () => {
    const frames: Array<{ type: string; name?: string; sessionId?: string; snapshot?: { value?: unknown } }> = [];
    const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
    try {
      await new Promise<void>((r) => wss.once('listening', () => r()));
      wss.on('connection', (ws) => ws.on('message', (d) => frames.push(JSON.parse(String(d)) as (typeof frames)[number])));
      const { port } = wss.address() as { port: number };
      const api = await start(['serve', '--port', '0', '--backend', 'oracle', '--sandbox', 'auto', '--state-dir', dir, '--inspect', `ws://127.0.0.1:${port}`]);
      const instance = { data_source: 'shell', instance_id: 'inspect-1', prompt: 'finish', eval_command: 'true', oracle: [{ tool_calls: [{ name: 'finish', arguments: {} }] }] };
      const res = await fetch(`${api}/v1/rollouts`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ instance }) });
      expect(res.status).toBe(202);
      await expect.poll(() => frames.some((f) => f.type === '@xstate.snapshot' && f.snapshot?.value === 'done'), { timeout: 20_000 }).toBe(true);
      const { id } = (await res.json()) as { id: string };
      // Each rollout actor is named by its rollout (#16.6).
      const actor = frames.find((f) => f.type === '@xstate.actor' && f.name === `rollout ${id}`);
      expect(actor).toBeDefined();
      expect(frames.some((f) => f.type === '@xstate.event' && f.sessionId === actor!.sessionId)).toBe(true);
    } finally {
      for (const c of wss.clients) c.terminate();
      await new Promise<void>((r) => wss.close(() => r()));
    }
  }, 180_000);
});
