import { describe, expect, it } from 'vitest';
import { EventHub } from '../../../src/runtime/event-hub.js';
import { ManualClock } from '../../../src/clock.js';

/** A rollout's rseq counter, as its session keeps it. */
const counter = (): { nextRseq(): number } => {
  let n = 0;
  return { nextRseq: () => ++n };
};

const state = (rolloutId: string) => ({ type: 'rollout.state' as const, rolloutId, state: 'queued' as const, prev: null, turn: 0 });

describe('EventHub', () => {
  it('is inactive with no subscriber and no retention', () => {
    const hub = new EventHub(new ManualClock(), 0, 10);
    expect(hub.active).toBe(false);
    const it = hub.subscribe();
    expect(hub.active).toBe(true);
    void it.return?.();
    expect(hub.active).toBe(false);
  });

  it('stamps a global seq, a per-rollout rseq and the clock time', async () => {
    const clock = new ManualClock(1_000);
    const hub = new EventHub(clock, 10, 10);
    const a = counter();
    const b = counter();
    hub.emit(a, null, state('a'));
    hub.emit(b, null, state('b'));
    hub.emit(a, null, state('a'));
    const it = hub.subscribe({ after: 0 });
    const got = [(await it.next()).value, (await it.next()).value, (await it.next()).value];
    expect(got.map((e) => (e.type === 'gap' ? null : [e.seq, e.rolloutId, e.rseq, e.ts]))).toEqual([
      [1, 'a', 1, 1_000],
      [2, 'b', 1, 1_000],
      [3, 'a', 2, 1_000],
    ]);
  });

  it('wakes a waiting reader when an event arrives', async () => {
    const hub = new EventHub(new ManualClock(), 0, 10);
    const it = hub.subscribe();
    const next = it.next();
    hub.emit(counter(), null, state('a'));
    expect((await next).value).toMatchObject({ rolloutId: 'a', seq: 1 });
  });

  it('drops the oldest events of a full buffer and reports them as one gap', async () => {
    const hub = new EventHub(new ManualClock(), 0, 2);
    const it = hub.subscribe();
    const c = counter();
    for (let i = 0; i < 5; i++) hub.emit(c, null, state('a'));
    expect((await it.next()).value).toEqual({ type: 'gap', from: 1, to: 3 });
    expect(((await it.next()).value as { seq: number }).seq).toBe(4);
    expect(((await it.next()).value as { seq: number }).seq).toBe(5);
  });

  it('ends a subscription when its signal aborts', async () => {
    const hub = new EventHub(new ManualClock(), 0, 2);
    const ac = new AbortController();
    const it = hub.subscribe({ signal: ac.signal });
    const next = it.next();
    ac.abort();
    expect((await next).done).toBe(true);
    expect(hub.subscribers).toBe(0);
  });

  it('replays nothing and reports no gap when resuming at the newest seq', async () => {
    const hub = new EventHub(new ManualClock(), 2, 10);
    const c = counter();
    for (let i = 0; i < 5; i++) hub.emit(c, null, state('a'));
    const it = hub.subscribe({ after: 5 });
    hub.emit(c, null, state('a'));
    expect(((await it.next()).value as { seq: number }).seq).toBe(6);
  });
});
