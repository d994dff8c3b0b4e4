import { describe, expect, it } from 'vitest';
import { fixturePages } from './fixture-pages.js';
import { syntheticRollout, type EventInput } from './fixture-server.js';
import { dataSourceFamilies } from '../../../src/server/visualizer-assets.js';

// Views you can trust (#30 §3): each bug seen on screen, in a real browser against the fixture
// server (the real visualizer handler and the service's WebSocket protocol). Also the integrity
// badge and filter of #27 §3.

const T0 = 1_800_000_000_000;
const pages = fixturePages();
const { missing, open } = pages;

const infraError = { name: 'InfraError', code: 'SANDBOX_START', message: 'sandbox did not start', retryable: true };

/**
 * A rollout whose first attempt fails at `failAt` ms and is retried after a backoff: the runtime
 * emits `rollout.retry`, then a fresh `rollout.submitted` (attempt 2) and the second attempt's
 * states. `end`: how the rollout ends — a second failure at `endAt` (infra-error), a completion,
 * or a cancel during the backoff (a `rollout.result` with no state event).
 */
function retriedRollout(id: string, t0: number, end: 'failed' | 'completed' | 'cancelled-in-backoff', failAt = 2000, endAt = 4200): EventInput[] {
  const ev: EventInput[] = [
    { type: 'rollout.submitted', rolloutId: id, ts: t0, instanceId: `inst-${id}`, trajectoryId: '0', groupId: null, dataSource: 'swe-lite', attempt: 1 },
    { type: 'rollout.state', rolloutId: id, ts: t0 + 1, state: 'queued', prev: null, turn: 0 },
    { type: 'rollout.state', rolloutId: id, ts: t0 + 2, state: 'initializing', prev: 'queued', turn: 0 },
    { type: 'rollout.state', rolloutId: id, ts: t0 + failAt, state: 'failed', prev: 'initializing', turn: 0 },
    { type: 'rollout.retry', rolloutId: id, ts: t0 + failAt, attempt: 2, delayMs: 500, error: infraError },
  ];
  const result = (outcome: 'infra-error' | 'completed' | 'cancelled', ts: number, reward: number) =>
    ({
      type: 'rollout.result', rolloutId: id, ts, outcome, finish: outcome === 'completed' ? 'finish_tool' : null, reward, resolved: reward > 0, error: outcome === 'completed' ? null : infraError,
      timing: { queueMs: 1, initMs: 1, runMs: 1, evalMs: 0, countedMs: 3, wallMs: ts - t0, timeoutTriggered: false }, tokens: 0, turns: 0,
    }) as EventInput;
  if (end === 'cancelled-in-backoff') return [...ev, result('cancelled', t0 + failAt + 200, 0)];
  const t2 = t0 + failAt + 500;
  ev.push(
    { type: 'rollout.submitted', rolloutId: id, ts: t2, instanceId: `inst-${id}`, trajectoryId: '0', groupId: null, dataSource: 'swe-lite', attempt: 2 },
    { type: 'rollout.state', rolloutId: id, ts: t2 + 1, state: 'queued', prev: null, turn: 0 },
    { type: 'rollout.state', rolloutId: id, ts: t2 + 2, state: 'initializing', prev: 'queued', turn: 0 },
  );
  if (end === 'failed') return [...ev, { type: 'rollout.state', rolloutId: id, ts: t0 + endAt, state: 'failed', prev: 'initializing', turn: 0 }, result('infra-error', t0 + endAt, 0)];
  return [
    ...ev,
    { type: 'rollout.state', rolloutId: id, ts: t0 + endAt - 1, state: 'evaluating', prev: 'initializing', turn: 0 },
    { type: 'rollout.state', rolloutId: id, ts: t0 + endAt, state: 'done', prev: 'evaluating', turn: 0 },
    result('completed', t0 + endAt, 1),
  ];
}

/** A listing entry for a rollout the server lists but whose events are past its retention. */
function listed(id: string, outcome: string, extra: Record<string, unknown> = {}) {
  const state = outcome === 'completed' ? 'done' : outcome === 'cancelled' ? 'cancelled' : 'failed';
  return { id, instance_id: `inst-${id}`, group_id: null, trajectory_id: '0', data_source: 'swe-lite', state, turn: 1, tokens: 10, attempt: 1, submitted_at: T0 - 60_000, outcome, reward: outcome === 'completed' ? 1 : 0, resolved: outcome === 'completed', ...extra };
}

describe.skipIf(missing)('visualizer page: views you can trust (#30)', () => {
  it('keeps the GRPO group panel updating after the selected rollout ended, as the other members end', async () => {
    const server = await pages.server();
    const rewards = [1, 0, 1, 0];
    const full = rewards.map((reward, i) => syntheticRollout(`g-${i}`, T0 + i * 10, { groupId: 'g', trajectoryId: String(i), reward }));
    const started = full.map((events, i) => events.slice(0, syntheticRollout(`g-${i}`, T0 + i * 10, { groupId: 'g', trajectoryId: String(i), finish: false }).length));
    server.push(full[0]!);
    for (const events of started.slice(1)) server.push(events);
    const p = await open(server, '#rollout=g-0');
    await expect.poll(() => p.getAttribute('#group', 'data-members')).toBe('4');
    await expect.poll(() => p.locator('#group .member .muted', { hasText: 'running' }).count()).toBe(3);
    // The selected rollout has ended; the others end now, one by one.
    for (let i = 1; i < 4; i++) server.push(full[i]!.slice(started[i]!.length));
    await expect.poll(() => p.locator('#group .member .muted', { hasText: 'running' }).count()).toBe(0);
    await expect.poll(() => p.locator('#group .member-adv.pos').count()).toBe(2);
    expect(await p.locator('#group .member-adv.neg').count()).toBe(2);
    expect(await p.getAttribute('#group', 'data-no-signal')).toBe('false');
    expect(await p.innerText('#group')).toContain('mean 0.500');
  });

  it('counts every ended rollout once, from one source: header, outcome and state charts and the ended filter agree', async () => {
    const server = await pages.server();
    // Rollouts known only from the listing (their events are past the server's retention).
    server.listing.push(listed('old-0', 'completed', { wall_ms: 3100 }), listed('old-1', 'task-error'), listed('old-2', 'completed', { wall_ms: 900 }));
    for (let i = 0; i < 5; i++) server.push(syntheticRollout(`ok-${i}`, T0 + i * 10, { reward: i % 2 }));
    server.push(retriedRollout('retry-ok-0', T0 + 100, 'completed'));
    server.push(retriedRollout('retry-ok-1', T0 + 200, 'completed'));
    server.push(retriedRollout('retry-cancel', T0 + 300, 'cancelled-in-backoff'));
    server.push(retriedRollout('retry-fail', T0 + 400, 'failed'));
    const cancelled = syntheticRollout('cancelled-0', T0 + 500, { finish: false });
    server.push([
      ...cancelled,
      { type: 'rollout.state', rolloutId: 'cancelled-0', ts: T0 + 700, state: 'cancelled', prev: 'acting', turn: 2 },
      {
        type: 'rollout.result', rolloutId: 'cancelled-0', ts: T0 + 700, outcome: 'cancelled', finish: null, reward: null, resolved: false, error: null,
        timing: { queueMs: 1, initMs: 1, runMs: 1, evalMs: 0, countedMs: 3, wallMs: 200, timeoutTriggered: false }, tokens: 0, turns: 2,
      },
    ]);
    server.push(syntheticRollout('live-0', T0 + 600, { finish: false }));
    const p = await open(server);
    // Many more end while the page watches: plain, retried (each way) and with both interleaved.
    const more: EventInput[][] = [];
    for (let i = 0; i < 90; i++) {
      const t = T0 + 10_000 + i * 50;
      more.push(i % 3 === 0 ? syntheticRollout(`more-${i}`, t, { reward: i % 2 }) : retriedRollout(`more-${i}`, t, (['failed', 'completed', 'cancelled-in-backoff'] as const)[i % 3]!));
    }
    for (let k = 0; more.some((e) => e.length > 0); k++) for (const events of more) if (events.length > 0) server.push(events.splice(0, 1 + (k % 3)));
    await p.waitForFunction(() => document.querySelector('#row-count')?.getAttribute('data-total') === '104');
    // 3 listed + 5 + 2 retried then completed + 1 cancelled in its backoff + 1 failed twice + 1 cancelled + 90 = 103 ended.
    await expect.poll(() => p.getAttribute('#counts', 'data-ended')).toBe('103');
    expect(await p.getAttribute('#counts', 'data-live')).toBe('1');
    const sum = (json: string | null, keys?: string[]) => Object.entries(JSON.parse(json ?? '{}') as Record<string, number>).reduce((a, [k, n]) => a + (keys === undefined || keys.includes(k) ? n : 0), 0);
    await expect.poll(async () => sum(await p.getAttribute('#chart-outcomes', 'data-counts'))).toBe(103);
    await expect.poll(async () => sum(await p.getAttribute('#chart-states', 'data-counts'), ['done', 'failed', 'timedOut', 'cancelled'])).toBe(103);
    expect(sum(await p.getAttribute('#chart-states', 'data-counts'))).toBe(104);
    await p.selectOption('#filter-state', 'ended');
    await expect.poll(() => p.getAttribute('#row-count', 'data-shown')).toBe('103');
    await p.selectOption('#filter-state', 'live');
    await expect.poll(() => p.getAttribute('#row-count', 'data-shown')).toBe('1');
    // The rollout cancelled while waiting for its retry is cancelled, not left as failed.
    await p.selectOption('#filter-state', 'cancelled');
    await expect.poll(() => p.getAttribute('#row-count', 'data-shown')).toBe(String(2 + 30));
    expect(await p.innerText('#counts')).toMatch(/^1 live · 103 ended/);
  });

  it('shows a failed, retried rollout’s elapsed time as its timeline does, and – when the time is unknown', async () => {
    const server = await pages.server();
    server.listing.push(listed('old-failed', 'infra-error', { wall_ms: 3100 }), listed('old-unknown', 'infra-error'));
    server.push(retriedRollout('fail-0', T0, 'failed', 2000, 4200));
    const p = await open(server);
    const cell = (id: string) => p.locator(`.rows .row[data-id="${id}"] > span`).nth(5);
    await expect.poll(() => cell('fail-0').innerText()).toBe('4.2s');
    await expect.poll(() => cell('old-failed').innerText()).toBe('3.1s');
    expect(await cell('old-unknown').innerText()).toBe('–');
    expect(await p.locator('.rows .row[data-id="fail-0"] > span').nth(2).innerText()).toBe('failed');
    await p.locator('.rows .row[data-id="fail-0"]').click();
    await expect.poll(() => p.innerText('#timeline .tl-axis')).toBe('0 … 4.2s');
    expect(await p.innerText('#detail-summary')).toContain('attempt 2');
  });

  it('shows no gap warning on a fresh page of a healthy server whose early events are past its retention, and says which window it shows', async () => {
    const server = await pages.server();
    for (let i = 0; i < 6; i++) server.push(syntheticRollout(`w-${i}`, T0 + i * 1000));
    const perRollout = syntheticRollout('x', 0).length;
    // The server retains only the last three rollouts' events; it still lists all six.
    server.forget(3 * perRollout);
    for (let i = 0; i < 3; i++) server.listing.push(listed(`w-${i}`, 'completed', { submitted_at: T0 + i * 1000, wall_ms: 110 }));
    const p = await open(server);
    await p.waitForFunction(() => document.querySelector('#row-count')?.getAttribute('data-total') === '6');
    await p.waitForFunction(() => document.querySelector('#conn')?.getAttribute('data-state') === 'open');
    await expect.poll(() => p.getAttribute('#window', 'data-events-from')).toBe(String(3 * perRollout + 1));
    expect(await p.isVisible('#gaps')).toBe(false);
    expect(await p.getAttribute('#window', 'data-events')).toBe(String(3 * perRollout));
    expect(await p.getAttribute('#window', 'data-events-total')).toBe(String(6 * perRollout));
    expect(await p.getAttribute('#window', 'data-rollouts')).toBe('6');
    expect(await p.getAttribute('#window', 'data-since')).toBe(String(T0));
    const text = await p.innerText('#window');
    expect(text).toContain(`events ${3 * perRollout} of ${6 * perRollout} (#1–#${3 * perRollout} are past the server's event retention)`);
    expect(text).toMatch(/^showing all 6 rollouts · .* · since .*\d\d:\d\d:\d\d$/);
  });

  it('warns in amber when a resume reaches past the retention: events this page lost', async () => {
    const server = await pages.server();
    server.push(syntheticRollout('a', T0));
    const p = await open(server);
    await p.waitForSelector('.rows .row[data-id="a"]');
    expect(await p.isVisible('#gaps')).toBe(false);
    await expect.poll(() => server!.subscribes.length).toBe(1);
    // While the page is away, the server emits more than it retains.
    server.dropConnections();
    server.push(syntheticRollout('b', T0 + 1000));
    server.push(syntheticRollout('c', T0 + 2000));
    server.forget(syntheticRollout('x', 0).length * 2);
    await p.waitForSelector('.rows .row[data-id="c"]');
    await expect.poll(() => p.getAttribute('#gaps', 'data-count')).toBe('1');
    expect(await p.isVisible('#gaps')).toBe(true);
    expect(await p.innerText('#gaps')).toMatch(/\d+ events were not delivered/);
  });

  it('merges data-source aliases as rollout run’s summary does, from the server’s own table', async () => {
    const families = dataSourceFamilies();
    expect(families['deepscaler']).toBe('math');
    const server = await pages.server();
    for (let i = 0; i < 3; i++) server.push(syntheticRollout(`ds-${i}`, T0 + i * 10, { task: 'deepscaler', reward: 1 }));
    for (let i = 0; i < 2; i++) server.push(syntheticRollout(`m-${i}`, T0 + 100 + i * 10, { task: 'math', reward: 0 }));
    server.push(syntheticRollout('cc-0', T0 + 200, { task: 'codecontests', reward: 1 }));
    const p = await open(server);
    const sources = async () => JSON.parse((await p.getAttribute('#chart-rewards', 'data-sources')) ?? '[]') as Array<{ name: string; n: number; mean: number }>;
    await expect.poll(async () => (await sources()).map((s) => [s.name, s.n, s.mean.toFixed(2)])).toEqual([
      ['code', 1, '1.00'],
      ['math', 5, '0.60'],
    ]);
  });

  it('badges rollouts with integrity violations (kinds in the tooltip) and filters to the flagged ones (#27)', async () => {
    const server = await pages.server();
    const hacked = syntheticRollout('hacked', T0, { reward: 1 });
    const result = hacked.at(-1)!;
    hacked[hacked.length - 1] = { ...result, violations: { 'edit-protected': 2, 'read-secret': 1 } } as EventInput;
    server.push(hacked);
    server.push(syntheticRollout('clean', T0 + 100));
    server.listing.push(listed('old-hacked', 'completed', { violations: { 'exec-denied': 1 } }));
    const p = await open(server);
    await p.waitForFunction(() => document.querySelector('#row-count')?.getAttribute('data-total') === '3');
    const flag = p.locator('.rows .row[data-id="hacked"] .flag');
    await expect.poll(() => flag.innerText()).toBe('⚑3');
    expect(await flag.getAttribute('title')).toBe('integrity violations: 2 edit-protected, 1 read-secret');
    expect(await p.locator('.rows .row[data-id="clean"] .flag').count()).toBe(0);
    expect(await p.getAttribute('#counts', 'data-flagged')).toBe('2');
    await p.check('#filter-flagged');
    await expect.poll(() => p.getAttribute('#row-count', 'data-shown')).toBe('2');
    expect(await p.locator('.rows .row[data-id="clean"]').isVisible()).toBe(false);
    await p.locator('.rows .row[data-id="hacked"]').click();
    await expect.poll(() => p.innerText('#detail-summary')).toContain('⚑ integrity: 2 edit-protected, 1 read-secret');
    await p.uncheck('#filter-flagged');
    await expect.poll(() => p.getAttribute('#row-count', 'data-shown')).toBe('3');
    expect(pages.browser().errors).toEqual([]);
  });

  it('says "live" on a live page', async () => {
    const server = await pages.server();
    const p = await open(server);
    await p.waitForFunction(() => document.querySelector('#conn')?.getAttribute('data-state') === 'open');
    await expect.poll(() => p.getAttribute('#conn', 'data-mode')).toBe('live');
    expect(await p.innerText('#conn')).toBe('live');
  });
});
