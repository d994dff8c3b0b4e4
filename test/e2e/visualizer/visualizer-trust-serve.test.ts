import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServerProcess, stopServerProcesses } from '../../helpers/server-process.js';
import { chromiumMissing, launchBrowser, type TestBrowser } from './browser.js';

// #30 §3 against the real thing: a healthy `rollout serve` that has run more events than it
// retains. A fresh page shows no amber gap warning, says which window it shows, and counts every
// ended rollout — finished and cancelled, from events or only from the listing — once.

let dir: string;
let browser: TestBrowser | null = null;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'viz-trust-'));
});
afterAll(async () => {
  await browser?.close();
  await stopServerProcesses();
  await rm(dir, { recursive: true, force: true });
});

const shell = (id: string, command: string, evalCommand = 'true') => ({
  data_source: 'shell',
  instance_id: id,
  prompt: `run ${id}`,
  eval_command: evalCommand,
  oracle: [{ tool_calls: [{ name: 'execute_bash', arguments: { command } }] }, { tool_calls: [{ name: 'finish', arguments: {} }] }],
});

describe('visualizer on a healthy rollout serve past its event retention', () => {
  it.skipIf(chromiumMissing())('shows no gap warning, says the window it covers, and its counts agree', async () => {
    const api = await startServerProcess('serve', ['--port', '0', '--backend', 'oracle', '--sandbox', 'none', '--retain', '40', '--state-dir', dir]);
    const instances = Array.from({ length: 6 }, (_, i) => shell(`t-${i}`, `echo trust-${i}`, i === 5 ? 'false' : 'true'));
    const res = await fetch(`${api.url}/v1/batches`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ instances, n: 1 }) });
    expect(res.status).toBeLessThan(300);
    // One more that waits until it is cancelled.
    const slow = await fetch(`${api.url}/v1/rollouts`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ instance: shell('slow', 'sleep 120') }) });
    expect(slow.status).toBe(202);
    const { id: slowId } = (await slow.json()) as { id: string };
    const listing = async () => ((await (await fetch(`${api.url}/v1/rollouts?limit=100`)).json()) as { rollouts: Array<{ id: string; state: string; outcome: string | null }> }).rollouts;
    await expect.poll(async () => (await listing()).filter((r) => r.outcome !== null).length, { timeout: 120_000 }).toBe(6);
    await expect.poll(async () => (await listing()).find((r) => r.id === slowId)?.state, { timeout: 60_000 }).toBe('acting');
    expect((await fetch(`${api.url}/v1/rollouts/${slowId}/cancel`, { method: 'POST' })).status).toBeLessThan(300);
    await expect.poll(async () => (await listing()).find((r) => r.id === slowId)?.outcome, { timeout: 60_000 }).toBe('cancelled');

    browser = await launchBrowser();
    const page = browser.page;
    await page.goto(`${api.url}/visualizer`);
    await page.waitForFunction(() => document.querySelector('#conn')?.getAttribute('data-state') === 'open');
    await page.waitForFunction(() => document.querySelector('#row-count')?.getAttribute('data-total') === '7');
    // Seven rollouts ran far more than 40 events: the first ones are past the retention, which
    // is no loss on a healthy server (the amber warning is for events this page lost).
    expect(await page.isVisible('#gaps')).toBe(false);
    await expect.poll(async () => Number(await page.getAttribute('#window', 'data-events-from'))).toBeGreaterThan(1);
    expect(await page.innerText('#window')).toMatch(/^showing all 7 rollouts · events 40 of \d+ \(#1–#\d+ are past the server's event retention\) · since /);
    await expect.poll(() => page.getAttribute('#counts', 'data-ended')).toBe('7');
    const split = async () => JSON.parse((await page.getAttribute('#chart-outcomes', 'data-counts')) ?? '{}') as Record<string, number>;
    await expect.poll(async () => Object.values(await split()).reduce((a, n) => a + n, 0)).toBe(7);
    expect((await split())['cancelled']).toBe(1);
    await page.selectOption('#filter-state', 'ended');
    await expect.poll(() => page.getAttribute('#row-count', 'data-shown')).toBe('7');
    expect(browser.errors).toEqual([]);
  }, 240_000);
});
