import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/clock.js';
import { OpsLog, type OpsSnapshot } from '../../../src/server/ops-log.js';

function rig(format: 'text' | 'json' = 'text') {
  const clock = new ManualClock(Date.UTC(2026, 11, 1, 12, 0, 0));
  const lines: string[] = [];
  let snap: OpsSnapshot | null = { completed: 0, outcomes: {}, live: 0, queued: 0, backends: [{ id: 'a', up: true }, { id: 'b', up: true }] };
  const log = new OpsLog({ source: () => snap, write: (l) => lines.push(l), format, clock });
  return { clock, lines, log, set: (s: OpsSnapshot | null) => (snap = s) };
}

describe('OpsLog', () => {
  it('writes nothing while idle, then a stats line every 10 s while work flows, with the outcomes since the last line', async () => {
    const r = rig();
    r.log.start();
    await r.clock.advance(30_000);
    expect(r.lines).toEqual([]);
    r.set({ completed: 20, outcomes: { completed: 15, 'infra-error': 5 }, live: 8, queued: 3, backends: [{ id: 'a', up: true }, { id: 'b', up: true }] });
    await r.clock.advance(10_000);
    expect(r.lines).toEqual(['2026-12-01T12:00:40.000Z 2.00 rollouts/s, 20 finished (completed 15, infra-error 5), 8 live, 3 queued, backends 2/2 up']);
    r.set({ completed: 30, outcomes: { completed: 25, 'infra-error': 5 }, live: 0, queued: 0, backends: [{ id: 'a', up: true }, { id: 'b', up: true }] });
    await r.clock.advance(10_000);
    expect(r.lines[1]).toBe('2026-12-01T12:00:50.000Z 1.00 rollouts/s, 10 finished (completed 10), 0 live, 0 queued, backends 2/2 up');
    await r.clock.advance(10_000);
    expect(r.lines).toHaveLength(2);
    r.log.stop();
  });

  it('writes one line as soon as a backend goes down or comes back, and when one is removed', async () => {
    const r = rig();
    r.log.start();
    r.set({ completed: 0, outcomes: {}, live: 0, queued: 0, backends: [{ id: 'a', up: true }, { id: 'b', up: false, why: 'ECONNREFUSED' }] });
    await r.clock.advance(1000);
    expect(r.lines).toEqual(['2026-12-01T12:00:01.000Z backend b down: ECONNREFUSED']);
    r.set({ completed: 0, outcomes: {}, live: 0, queued: 0, backends: [{ id: 'a', up: true }, { id: 'b', up: true }] });
    await r.clock.advance(1000);
    r.set({ completed: 0, outcomes: {}, live: 0, queued: 0, backends: [{ id: 'b', up: true }] });
    await r.clock.advance(1000);
    expect(r.lines.slice(1)).toEqual(['2026-12-01T12:00:02.000Z backend b up', '2026-12-01T12:00:03.000Z backend a removed']);
    r.log.stop();
  });

  it('says which worker joined or left a cluster, and counts a restarted runtime from zero', async () => {
    const r = rig('json');
    const base = { outcomes: {}, live: 1, queued: 0, backends: [] };
    r.set({ ...base, completed: 50, workers: ['w1', 'w2'] });
    r.log.start();
    r.set({ ...base, completed: 50, workers: ['w1'] });
    await r.clock.advance(1000);
    r.set({ ...base, completed: 50, workers: ['w1', 'w3'] });
    await r.clock.advance(1000);
    expect(r.lines.map((l) => JSON.parse(l) as Record<string, unknown>)).toEqual([
      { time: '2026-12-01T12:00:01.000Z', event: 'worker.down', worker: 'w2' },
      { time: '2026-12-01T12:00:02.000Z', event: 'worker.up', worker: 'w3' },
    ]);
    r.set({ ...base, completed: 4, outcomes: { completed: 4 }, workers: ['w1', 'w3'] });
    await r.clock.advance(8000);
    expect(JSON.parse(r.lines[2]!)).toMatchObject({ event: 'stats', finished: 4, outcomes: { completed: 4 }, workers: 2, rollouts_per_s: 0.4 });
    r.log.stop();
  });

  it('stays silent while the service has no runtime (stopped)', async () => {
    const r = rig();
    r.set(null);
    r.log.start();
    await r.clock.advance(60_000);
    expect(r.lines).toEqual([]);
    r.log.stop();
  });
});
