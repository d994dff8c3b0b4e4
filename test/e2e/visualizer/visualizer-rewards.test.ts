import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { fixturePages } from './fixture-pages.js';
import { syntheticRollout } from './fixture-server.js';

// The reward-first parts of the page in a real browser: reward histogram and outcome split,
// GRPO group view, token view, eval panel, downloads, the first-run hint and deep links.

const T0 = 1_800_000_000_000;
const pages = fixturePages();
const { missing, open } = pages;

/** A result with a two-turn token trajectory (the second turn cut by the token limit) and eval details. */
function fullResult(id: string) {
  const turn0Prompt = [1, 2, 3, 4];
  const turn0Out = [10, 11, 12];
  const turn1Prompt = [...turn0Prompt, ...turn0Out, 5, 6];
  const turn1Out = [20, 21];
  const tokens = [...turn1Prompt, ...turn1Out];
  const lossMask = [0, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1];
  const logprobs = [0, 0, 0, 0, -0.01, -0.5, -6, 0, 0, -0.2, -3];
  return {
    id,
    group_id: null,
    result: {
      id,
      outcome: 'truncated',
      reward: 0,
      resolved: false,
      evalDetails: {
        applied: true,
        exit_code: 1,
        tests: [
          { name: 'tests/test_calc.py::test_add', status: 'passed', kind: 'PASS_TO_PASS' },
          { name: 'tests/test_calc.py::test_div_zero', status: 'failed', kind: 'FAIL_TO_PASS' },
        ],
        output: '1 failed, 1 passed',
        git_patch: 'diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n-    return a / b\n+    return a / b if b else 0\n',
      },
      trajectory: {
        tokens,
        lossMask,
        logprobs,
        turns: [
          { promptIds: turn0Prompt, outputIds: turn0Out, logprobs: logprobs.slice(4, 7), backendId: 'b0', weightVersion: 3, finishReason: 'stop', latencyMs: 5 },
          { promptIds: turn1Prompt, outputIds: turn1Out, logprobs: logprobs.slice(9), backendId: 'b1', weightVersion: 4, finishReason: 'length', latencyMs: 5 },
        ],
        messages: [{ role: 'user', content: 'fix calc.py' }],
      },
    },
  };
}

describe.skipIf(missing)('visualizer page: rewards first', () => {
  it('draws the reward distribution per data source and splits completed rollouts with reward 0 out of the outcomes', async () => {
    const server = await pages.server();
    for (let i = 0; i < 10; i++) server.push(syntheticRollout(`m-${i}`, T0 + i * 10, { task: 'math', reward: i < 3 ? 0 : 1 }));
    for (let i = 0; i < 4; i++) server.push(syntheticRollout(`c-${i}`, T0 + 500 + i * 10, { task: 'code', reward: 0.5 }));
    const p = await open(server);
    await p.waitForFunction(() => document.querySelector('#row-count')?.getAttribute('data-total') === '14');
    const sources = async () => JSON.parse((await p.getAttribute('#chart-rewards', 'data-sources')) ?? '[]') as Array<{ name: string; n: number; mean: number; counts: number[] }>;
    await expect.poll(async () => (await sources()).length).toBe(2);
    const math = (await sources()).find((s) => s.name === 'math')!;
    expect(math.n).toBe(10);
    expect(math.mean).toBeCloseTo(0.7);
    expect(math.counts[0]).toBe(3);
    expect(math.counts[9]).toBe(7);
    const zero = await p.evaluate(() => (window as unknown as { __viz: { store: { rewards: { completedZero: number } } } }).__viz.store.rewards.completedZero);
    expect(zero).toBe(3);
  });

  it('shows a GRPO group’s members side by side with their advantage and flags an all-equal group as no signal', async () => {
    const server = await pages.server();
    for (let i = 0; i < 4; i++) server.push(syntheticRollout(`g1-${i}`, T0 + i * 10, { groupId: 'g1', trajectoryId: String(i), reward: i % 2 }));
    for (let i = 0; i < 4; i++) server.push(syntheticRollout(`g2-${i}`, T0 + 100 + i * 10, { groupId: 'g2', trajectoryId: String(i), reward: 1 }));
    const p = await open(server, '#rollout=g1-1');
    await expect.poll(() => p.getAttribute('#group', 'data-members')).toBe('4');
    expect(await p.getAttribute('#group', 'data-no-signal')).toBe('false');
    expect(await p.locator('#group .member-adv.pos').count()).toBe(2);
    expect(await p.locator('#group .member-adv.neg').count()).toBe(2);
    await expect.poll(() => p.getAttribute('#groups-summary', 'data-no-signal')).toBe('1');
    // Another group: every reward 1, so no signal; clicking a member opens it.
    await p.evaluate(() => (window as unknown as { __viz: { select(id: string): void } }).__viz.select('g2-0'));
    await expect.poll(() => p.getAttribute('#group', 'data-no-signal')).toBe('true');
    expect(await p.innerText('#group')).toContain('no signal');
    await p.click('#group .member[data-id="g2-3"]');
    await expect.poll(() => p.evaluate(() => (window as unknown as { __viz: { selectedId: string } }).__viz.selectedId)).toBe('g2-3');
  });

  it('shows the token view with the loss mask, a logprob heat map and the turn cut by the token limit', async () => {
    const server = await pages.server();
    server.results.set('t-0', fullResult('t-0'));
    server.push(syntheticRollout('t-0', T0));
    const p = await open(server, '#rollout=t-0');
    await expect.poll(() => p.getAttribute('#tokens', 'data-tokens')).toBe('11');
    expect(await p.getAttribute('#tokens', 'data-sampled')).toBe('5');
    expect(await p.locator('#tokens .tok-sampled').count()).toBe(5);
    expect(await p.locator('#tokens .tok-prompt').count()).toBe(6);
    // A likely token and an unlikely one get different colours.
    const [sure, unlikely] = await p.evaluate(() => {
      const cells = Array.from(document.querySelectorAll<HTMLElement>('#tokens .tok-sampled'));
      return [cells[0]!.style.background, cells[2]!.style.background];
    });
    expect(sure).not.toBe(unlikely);
    const turns = await p.locator('#tokens .turn').allInnerTexts();
    expect(turns[0]).toMatch(/finish stop · backend b0 · weights 3/);
    expect(turns[1]).toMatch(/finish length \(cut by the token limit\) · backend b1 · weights 4/);
    expect(await p.locator('#tokens .turn.cut').count()).toBe(1);
  });

  it('shows the eval panel: the per-test report and the git patch as a diff', async () => {
    const server = await pages.server();
    server.results.set('e-0', fullResult('e-0'));
    server.push(syntheticRollout('e-0', T0));
    const p = await open(server, '#rollout=e-0');
    await expect.poll(() => p.locator('#eval .tests tr').count()).toBe(2);
    expect(await p.locator('#eval .test-fail').innerText()).toContain('test_div_zero');
    expect(await p.locator('#eval .test-pass').innerText()).toContain('test_add');
    expect(await p.locator('#eval .diff .d-add').innerText()).toContain('return a / b if b else 0');
    expect(await p.locator('#eval .diff .d-del').innerText()).toContain('return a / b');
    expect(await p.innerText('#eval')).toContain('exit_code');
  });

  it('downloads the selected trajectory as JSON and the filtered rollouts as JSONL', async () => {
    const server = await pages.server();
    for (let i = 0; i < 3; i++) {
      server.results.set(`d-${i}`, fullResult(`d-${i}`));
      server.push(syntheticRollout(`d-${i}`, T0 + i * 10, { task: i === 2 ? 'math' : 'swe' }));
    }
    const p = await open(server, '#rollout=d-1');
    await expect.poll(() => p.getAttribute('#tokens', 'data-tokens')).toBe('11');
    const [one] = await Promise.all([p.waitForEvent('download'), p.click('#download-one')]);
    expect(one.suggestedFilename()).toBe('d-1.json');
    const json = JSON.parse(await readFile((await one.path())!, 'utf8')) as { id: string; trajectory: { tokens: number[] } };
    expect(json.id).toBe('d-1');
    expect(json.trajectory.tokens).toHaveLength(11);
    await p.fill('#filter-task', 'swe');
    await expect.poll(() => p.getAttribute('#row-count', 'data-shown')).toBe('2');
    const [many] = await Promise.all([p.waitForEvent('download'), p.click('#download-filtered')]);
    expect(many.suggestedFilename()).toBe('rollouts-2.jsonl');
    const lines = (await readFile((await many.path())!, 'utf8')).trim().split('\n').map((l) => JSON.parse(l) as { id: string });
    expect(lines.map((l) => l.id).sort()).toEqual(['d-0', 'd-1']);
  });

  it('shows a first-run hint with a submit command on an empty page, and hides it once work arrives', async () => {
    const server = await pages.server();
    const p = await open(server);
    await expect.poll(() => p.isVisible('#first-run')).toBe(true);
    expect(await p.innerText('#first-run-curl')).toContain(`curl -X POST ${server.url}/v1/rollouts`);
    // Every run opens here: the hint names the live flag and the viewer of finished runs (#30).
    expect(await p.innerText('#first-run')).toMatch(/rollout run TASKS\.jsonl --visualize[\s\S]*rollout view rollouts-out\/<timestamp>/);
    server.push(syntheticRollout('r-0', T0));
    await expect.poll(() => p.isVisible('#first-run')).toBe(false);
  });

  it('scrolls a deep link’s row into view and highlights it', async () => {
    const server = await pages.server();
    for (let i = 0; i < 300; i++) server.push(syntheticRollout(`r-${i}`, T0 + i * 10, { turns: 1 }));
    const p = await open(server, '#rollout=r-250');
    await p.waitForFunction(() => document.querySelector('#row-count')?.getAttribute('data-total') === '300');
    await expect.poll(() => p.locator('.rows .row.selected[data-id="r-250"]').isVisible()).toBe(true);
    const inView = await p.evaluate(() => {
      const rows = document.querySelector('#rows')!.getBoundingClientRect();
      const row = document.querySelector('.rows .row.selected')!.getBoundingClientRect();
      return row.top >= rows.top && row.bottom <= rows.bottom;
    });
    expect(inView).toBe(true);
    // A new hash opens another rollout without a reload.
    await p.evaluate(() => (location.hash = '#rollout=r-5'));
    await expect.poll(() => p.evaluate(() => (window as unknown as { __viz: { selectedId: string } }).__viz.selectedId)).toBe('r-5');
  });
});
