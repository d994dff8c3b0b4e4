import { mkdir, stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { codecFor } from '../../../src/llm/codec-registry.js';
import type { RolloutResult } from '../../../src/protocol/trajectory.js';
import { chromiumMissing, launchBrowser, type TestBrowser } from './browser.js';
import { serveRecordedRun, twoTurnTrajectory, type RecordedRollout } from './recorded-run.js';

// The views an RL engineer reads a run by (#30 §4), in Chromium against the real service serving
// a recorded run (what `rollout view DIR` serves): the token view's text, colours and hover; the
// sortable GRPO groups table and its member links; reward and response length over time per data
// source and per weight version, with axes and a time range; a 1280-px screenshot.

// The page's modules are plain browser JavaScript (checked by visualizer/tsconfig.json), loaded as the unit tests do.
const { CHUNK, logprobColor } = (await import(/* @vite-ignore */ '../../../visualizer/tokens.js' as string)) as { CHUNK: number; logprobColor(logprob: number): string };
const T0 = Date.UTC(2026, 0, 1, 12, 0, 0);
const missing = chromiumMissing();
const codec = codecFor({});
const SAMPLED_LOGPROBS = [-0.01, -2, -7, -0.5];
const tokTrajectory: RolloutResult['trajectory'] = twoTurnTrajectory(
  codec,
  { prompt: 'Question: what is 2+2?\n', answer0: 'Let me check.', tool: '\nobservation: 4\n', answer1: 'The answer is 4.' },
  SAMPLED_LOGPROBS,
  1,
  2,
);
/** Rewards of groups g0..g3: signal, no signal (all 1), signal, small spread. */
const GROUP_REWARDS = [
  [1, 0, 0, 0],
  [1, 1, 1, 1],
  [0.5, 0, 1, 0.25],
  [0.2, 0.4, 0.2, 0.4],
];
const rollouts: RecordedRollout[] = [
  ...GROUP_REWARDS.flatMap((rewards, g) =>
    rewards.map((reward, m) => ({
      id: `g${g}-${m}`,
      dataSource: g % 2 === 0 ? 'math' : 'code',
      groupId: `g${g}`,
      trajectoryId: String(m),
      startTs: T0 + g * 120_000 + m * 1000,
      endTs: T0 + g * 120_000 + m * 1000 + 30_000,
      reward,
      responseTokens: 10 * (m + 1) + 5 * g,
      weightVersion: g < 2 ? 1 : 2,
    })),
  ),
  { id: 'tok-0', dataSource: 'math', groupId: null, trajectoryId: '0', startTs: T0, endTs: T0 + 5000, reward: 1, trajectory: tokTrajectory },
  { id: 'big-0', dataSource: 'math', groupId: null, trajectoryId: '0', startTs: T0 + 10_000, endTs: T0 + 600_000, reward: 0, responseTokens: 30_000, weightVersion: 2 },
];

let run: Awaited<ReturnType<typeof serveRecordedRun>> | null = null;
let browser: TestBrowser | undefined;
let page: Page;

beforeAll(async () => {
  if (missing) return;
  run = await serveRecordedRun(rollouts);
  browser = await launchBrowser();
  page = browser.page;
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.goto(`${run.url}/visualizer`);
  await page.waitForFunction((n) => document.querySelector('#row-count')?.getAttribute('data-total') === String(n), rollouts.length);
}, 120_000);
afterAll(async () => {
  await browser?.close();
  await run?.close();
});

const viz = <T>(p: Page, fn: string): Promise<T> => p.evaluate(fn) as Promise<T>;
/** The CSS colour the browser computes for `color` (hsl → rgb), to compare with a span's. */
const cssColor = (p: Page, color: string): Promise<string> =>
  p.evaluate((c) => {
    const e = document.createElement('span');
    e.style.background = c;
    return e.style.background;
  }, color);
type Series = { name: string; n: number; points: number; last: number | null };
const series = async (id: string): Promise<Series[]> => JSON.parse((await page.getAttribute(id, 'data-series')) ?? '[]') as Series[];

describe.skipIf(missing)('visualizer views: tokens, groups table, trends', () => {
  it('shows the token view as decoded text, coloured by loss mask and logprob, with a hover naming id, logprob, turn and weight version', async () => {
    await page.evaluate(() => (location.hash = '#rollout=tok-0'));
    await page.waitForSelector('#tokens[data-rollout="tok-0"][data-text="loaded"]');
    const t = tokTrajectory;
    const spans = await page.$$eval('#tokens .tv-strip .tok', (els) => els.map((e) => ({ text: e.textContent, cls: e.className, bg: (e as HTMLElement).style.background, i: Number((e as HTMLElement).dataset.i) })));
    expect(spans).toHaveLength(t.tokens.length);
    // Each span is its token's own decode (newlines shown as ↵ and kept), in order.
    expect(spans.map((s) => s.text)).toEqual(t.tokens.map((id) => codec.decode([id]).replace(/\t/g, '→\t').replace(/\n/g, '↵\n')));
    const turn0 = t.turns[0]!;
    const start0 = turn0.promptIds.length;
    expect(spans.slice(start0, start0 + turn0.outputIds.length).map((s) => s.text).join('')).toBe('Let me check.');
    // Mask 0 (prompt, tool observation) grey without a background; mask 1 on the logprob scale.
    for (const [i, s] of spans.entries()) {
      if (t.lossMask[i] === 0) {
        expect(s.cls).toContain('tok-prompt');
        expect(s.bg).toBe('');
      } else {
        expect(s.cls).toContain('tok-sampled');
        expect(s.bg).toBe(await cssColor(page, logprobColor(t.logprobs[i]!)));
      }
    }
    // A sure token and an unlikely one differ in colour.
    const sure = t.logprobs.findIndex((lp, i) => t.lossMask[i] === 1 && lp === -0.01);
    const unlikely = t.logprobs.findIndex((lp, i) => t.lossMask[i] === 1 && lp === -7);
    expect(spans[sure]!.bg).not.toBe(spans[unlikely]!.bg);

    // Hover the first token the second turn sampled.
    const i1 = t.turns[1]!.promptIds.length;
    await page.hover(`#tokens .tok[data-i="${i1}"]`);
    await expect.poll(() => page.isVisible('#tokens .tv-tip')).toBe(true);
    const tip = await page.innerText('#tokens .tv-tip');
    expect(tip).toContain(`token #${i1} · id ${t.tokens[i1]} · ${JSON.stringify(codec.decode([t.tokens[i1]!]))}`);
    expect(tip).toContain(`sampled (mask 1) · logprob ${t.logprobs[i1]!.toFixed(3)}`);
    expect(tip).toContain('turn 1 · weight version 2 · backend b1');
    // A tool observation token: mask 0, in the second turn's prompt, no weight version.
    const toolToken = start0 + turn0.outputIds.length + 1;
    await page.hover(`#tokens .tok[data-i="${toolToken}"]`);
    await expect.poll(() => page.innerText('#tokens .tv-tip')).toContain(`token #${toolToken} · id ${t.tokens[toolToken]}`);
    expect(await page.innerText('#tokens .tv-tip')).toMatch(/prompt \/ tool \(mask 0\)\nturn 1 \(its prompt\) · weight version –/);
  });

  it('draws a 30k-token trajectory lazily: the first chunk at once, the rest as it scrolls into view', async () => {
    const started = Date.now();
    await page.evaluate(() => (location.hash = '#rollout=big-0'));
    await page.waitForSelector('#tokens[data-rollout="big-0"][data-text="loaded"][data-tokens="30000"]');
    const drawnMs = Date.now() - started;
    const drawn = await page.locator('#tokens .tv-strip .tok').count();
    expect(drawn).toBeGreaterThanOrEqual(CHUNK);
    expect(drawn).toBeLessThan(30_000 / 2);
    // Scrolling to the end draws the last chunk (and its last token).
    await expect
      .poll(async () => {
        await page.$eval('#tokens .tv-strip', (e) => (e.scrollTop = e.scrollHeight));
        return page.locator('#tokens .tok[data-i="29999"]').count();
      })
      .toBe(1);
    console.log(`[visualizer] 30k-token view: text loaded and first chunk drawn ${drawnMs} ms after selecting (including the fetch); ${drawn} spans before scrolling`);
  });

  it('lists GRPO groups in a table sortable by each column, flags the no-signal group, and links each member', async () => {
    await page.waitForSelector('#groups-table[data-groups="4"]');
    const order = () => page.$$eval('#groups-table tbody tr', (rows) => rows.map((r) => (r as HTMLElement).dataset.group));
    // Default: advantage spread, largest first (g0 and g2 span 0..1; g1 has none).
    expect(await page.getAttribute('#groups-table', 'data-sort')).toBe('spread:desc');
    expect((await order()).at(-1)).toBe('g1');
    const row = (g: string) => page.$$eval(`#groups-table tr[data-group="${g}"] td`, (tds) => tds.map((td) => td.textContent));
    expect(await row('g2')).toEqual(['g2', '4/4', '0.438', '0.370', '1.000', '', expect.stringContaining('#0 0.5')]);
    expect((await row('g1'))[5]).toBe('no signal');
    await page.click('#groups-table th[data-sort="mean"]');
    expect(await order()).toEqual(['g1', 'g2', 'g3', 'g0']);
    await page.click('#groups-table th[data-sort="mean"]');
    expect(await order()).toEqual(['g0', 'g3', 'g2', 'g1']);
    await page.click('#groups-table th[data-sort="std"]');
    expect((await order())[0]).toBe('g0');
    await page.click('#groups-table th[data-sort="noSignal"]');
    expect((await order())[0]).toBe('g1');
    // A member link opens that rollout.
    await page.click('#groups-table tr[data-group="g2"] .members a[data-id="g2-2"]');
    await expect.poll(() => viz<string>(page, 'window.__viz.selectedId')).toBe('g2-2');
    await page.waitForSelector('#detail[data-rollout="g2-2"]');
  });

  it('charts reward and response length over time per data source and per weight version, with labelled axes and a time range', async () => {
    const count = (key: (r: RecordedRollout) => string, from = -Infinity) => {
      const out: Record<string, number> = {};
      for (const r of rollouts) if (r.endTs >= from) out[key(r)] = (out[key(r)] ?? 0) + 1;
      return out;
    };
    const named = async (id: string) => Object.fromEntries((await series(id)).map((s) => [s.name, s.n]));
    await expect.poll(() => named('#chart-trend-reward')).toEqual(count((r) => r.dataSource));
    expect(await named('#chart-trend-length')).toEqual(count((r) => r.dataSource));
    for (const id of ['#chart-trend-reward', '#chart-trend-length']) {
      expect(await page.getAttribute(id, 'data-x-label')).toBe('time (runtime clock)');
      const xTicks = JSON.parse((await page.getAttribute(id, 'data-x-ticks'))!) as string[];
      expect(xTicks.length).toBeGreaterThanOrEqual(3);
      for (const tk of xTicks) expect(tk).toMatch(/^\d\d:\d\d(:\d\d)?$/);
      expect((JSON.parse((await page.getAttribute(id, 'data-y-ticks'))!) as string[]).length).toBeGreaterThanOrEqual(2);
    }
    expect(await page.getAttribute('#chart-trend-reward', 'data-y-label')).toBe('reward');
    expect(await page.getAttribute('#chart-trend-length', 'data-y-label')).toBe('sampled tokens');
    // The length comes from the recorded LLM calls: the 30k-token rollout's bucket alone is its length.
    expect((await series('#chart-trend-length')).find((s) => s.name === 'math')!.last).toBe(30_000);

    // Per weight version (the oldest that sampled a token of each rollout, from the listing).
    await page.selectOption('#trend-split', 'version');
    const versions = count((r) => `v${r.trajectory?.minWeightVersion ?? r.weightVersion}`);
    expect(versions).toEqual({ v1: 9, v2: 9 });
    await expect.poll(() => named('#chart-trend-reward')).toEqual(versions);
    expect(await named('#chart-trend-length')).toEqual(versions);

    // The last 5 minutes of the run only.
    await page.selectOption('#trend-range', String(5 * 60_000));
    const end = Math.max(...rollouts.map((r) => r.endTs));
    await expect.poll(() => named('#chart-trend-reward')).toEqual(count((r) => `v${r.trajectory?.minWeightVersion ?? r.weightVersion}`, end - 5 * 60_000));
    const [t0, t1] = (await page.getAttribute('#chart-trend-reward', 'data-range'))!.split(',').map(Number);
    expect([t0, t1]).toEqual([end - 5 * 60_000, end]);
    await page.selectOption('#trend-split', 'source');
    await expect.poll(() => named('#chart-trend-reward')).toEqual(count((r) => r.dataSource, end - 5 * 60_000));
    await page.selectOption('#trend-range', '0');
  });

  it('is readable at 1280 px: the trend charts are wide and drawn, and a full-page screenshot is not blank', async () => {
    const widths = await page.$$eval('canvas.trend', (els) => els.map((e) => e.clientWidth));
    for (const w of widths) expect(w).toBeGreaterThanOrEqual(560);
    // The reward chart's pixels: many colours (axes, text, one line per series), not a blank canvas.
    const pixels = await page.$eval('#chart-trend-reward', (c) => {
      const canvas = c as HTMLCanvasElement;
      const data = canvas.getContext('2d')!.getImageData(0, 0, canvas.width, canvas.height).data;
      const colours = new Set<number>();
      let inked = 0;
      for (let i = 0; i < data.length; i += 4) {
        if (data[i + 3]! > 0) inked++;
        colours.add((data[i]! << 16) | (data[i + 1]! << 8) | data[i + 2]!);
      }
      return { inked, total: data.length / 4, colours: colours.size };
    });
    expect(pixels.colours).toBeGreaterThan(20);
    expect(pixels.inked / pixels.total).toBeGreaterThan(0.01);
    const dir = resolve('test-output');
    await mkdir(dir, { recursive: true });
    const shot = join(dir, 'visualizer-views-1280.png');
    await page.evaluate(() => (location.hash = '#rollout=tok-0'));
    await page.waitForSelector('#tokens[data-rollout="tok-0"][data-text="loaded"]');
    await page.screenshot({ path: shot, fullPage: true });
    expect((await stat(shot)).size).toBeGreaterThan(40_000);
    console.log(`[visualizer] screenshot: ${shot}`);
    expect(browser!.errors).toEqual([]);
  });
});
