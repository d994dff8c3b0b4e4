import { execFile, spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServerProcess, stopServerProcesses } from '../../helpers/server-process.js';
import { chromiumMissing, launchBrowser, type TestBrowser } from './browser.js';

// Every run opens in the visualizer (#30): a real `rollout run` writes its output directory, and
// `rollout view DIR` serves it read-only in the same page, checked in Chromium.

const BIN = resolve('bin/rollout.js');
let dir: string;
let browser: TestBrowser | null = null;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'viz-view-'));
});
afterAll(async () => {
  await browser?.close();
  await stopServerProcesses();
  await rm(dir, { recursive: true, force: true });
});

function rollout(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((res) => {
    execFile(process.execPath, [BIN, ...args], { cwd: dir, timeout: 170_000 }, (err, stdout, stderr) => res({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }));
  });
}

const tasks = Array.from({ length: 3 }, (_, i) => ({
  data_source: 'shell',
  instance_id: `view-${i}`,
  prompt: `Print probe ${i}.`,
  eval_command: i === 2 ? 'false' : 'true',
  oracle: [{ tool_calls: [{ name: 'execute_bash', arguments: { command: `echo view-probe-${i}` } }] }, { tool_calls: [{ name: 'finish', arguments: {} }] }],
}));

describe('rollout view', () => {
  it.skipIf(chromiumMissing())("serves a finished run's directory in the visualizer: rows, rewards, a GRPO group, the terminal replay; read-only", async () => {
    const file = join(dir, 'tasks.jsonl');
    await writeFile(file, tasks.map((t) => JSON.stringify(t)).join('\n') + '\n');
    const out = join(dir, 'run');
    const ran = await rollout(['run', file, '--n', '2', '--out', out]);
    expect(ran.code).toBe(0);
    expect(ran.stdout).toContain('view it:      rollout view run');

    const view = await startServerProcess('view', [out, '--port', '0']);
    expect((await fetch(`${view.url}/v1/rollouts/nope`)).status).toBe(404);
    const listing = (await (await fetch(`${view.url}/v1/rollouts?limit=100`)).json()) as { rollouts: { id: string; outcome: string; reward: number }[] };
    expect(listing.rollouts).toHaveLength(6);
    expect(listing.rollouts.map((r) => r.reward).sort()).toEqual([0, 0, 1, 1, 1, 1]);
    const submit = await fetch(`${view.url}/v1/rollouts`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ instance: tasks[0] }) });
    expect(submit.status).toBe(400);
    expect(await submit.text()).toContain('read-only view of a finished run');

    browser = await launchBrowser();
    const page = browser.page;
    await page.goto(`${view.url}/visualizer`);
    await page.waitForFunction(() => document.querySelector('#row-count')?.getAttribute('data-total') === '6');
    // A replay is not live (#30): the badge says so, and which run.
    await expect.poll(() => page.getAttribute('#conn', 'data-mode')).toBe('replay');
    await expect.poll(() => page.innerText('#conn')).toBe('replay · run');
    expect(await page.innerText('#window')).toMatch(/^showing all 6 rollouts · events all \d+ · since /);
    await page.waitForFunction(() => document.querySelectorAll('.rows .row .outcome-completed').length === 6);
    // The reward chart and the GRPO group cards are drawn from the replayed results.
    const sources = async () => JSON.parse((await page.getAttribute('#chart-rewards', 'data-sources')) ?? '[]') as Array<{ name: string; n: number; mean: number }>;
    await expect.poll(async () => (await sources()).map((x) => [x.name, x.n, x.mean.toFixed(3)])).toEqual([['shell', 6, '0.667']]);
    await expect.poll(() => page.innerText('body')).toMatch(/3 groups · 3 complete/);
    const id = listing.rollouts.find((r) => r.reward === 1)!.id;
    await page.locator(`.rows .row[data-id="${id}"]`).click();
    await page.waitForSelector(`#detail[data-rollout="${id}"] #graph .node.current[data-state="done"]`);
    await expect.poll(() => page.innerText('#terminal .term-pane')).toMatch(/\$ echo view-probe-\d\nview-probe-\d/);
    const shots = resolve('test-output');
    await mkdir(shots, { recursive: true });
    await page.screenshot({ path: join(shots, 'visualizer-view.png') });
    expect(browser.errors).toEqual([]);
  }, 240_000);

  it.skipIf(chromiumMissing())('rollout run --visualize serves the live page of the running job', async () => {
    // A task that holds its sandbox until the test has seen the live page.
    const gate = join(dir, 'gate');
    const slow = { data_source: 'shell', instance_id: 'live-0', prompt: 'wait', eval_command: 'true', oracle: [{ tool_calls: [{ name: 'execute_bash', arguments: { command: `while [ ! -e ${gate} ]; do sleep 0.1; done; echo released` } }] }, { tool_calls: [{ name: 'finish', arguments: {} }] }] };
    const file = join(dir, 'live.jsonl');
    await writeFile(file, `${JSON.stringify(slow)}\n`);
    const child = spawn(process.execPath, [BIN, 'run', file, '--out', join(dir, 'live-run'), '--visualize', '--sandbox', 'none'], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const exited = new Promise<number | null>((r) => child.once('exit', r));
    await expect.poll(() => /live visualizer at (http:\/\/\S+)\/visualizer/.exec(err)?.[1] ?? null, { timeout: 60_000 }).not.toBeNull();
    const url = /live visualizer at (http:\/\/\S+)\/visualizer/.exec(err)![1]!;
    browser ??= await launchBrowser();
    const page = browser.page;
    await page.goto(`${url}/visualizer`);
    await page.waitForFunction(() => document.querySelector('#conn')?.getAttribute('data-state') === 'open');
    await page.waitForFunction(() => document.querySelector('#row-count')?.getAttribute('data-total') === '1');
    expect(await page.getAttribute('#conn', 'data-mode')).toBe('live');
    expect(await page.innerText('#conn')).toBe('live');
    // Live: the rollout is at its action, not ended.
    expect(await page.locator('.rows .row .outcome-completed').count()).toBe(0);
    await writeFile(gate, '');
    await page.waitForFunction(() => document.querySelectorAll('.rows .row .outcome-completed').length === 1, undefined, { timeout: 60_000 });
    expect(await exited).toBe(0);
  }, 180_000);

  it('refuses a directory that is not a run, naming it, with exit 2', async () => {
    const r = await rollout(['view', dir, '--port', '0']);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(`rollout view: ${dir} is not a run's output directory: it has no trajectories.jsonl (rollout run writes one under rollouts-out/<timestamp>/)\n`);
  }, 60_000);
});
