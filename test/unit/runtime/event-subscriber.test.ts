import { describe, expect, it } from 'vitest';
import type { RolloutEvent } from '../../../src/protocol/events.js';
import { EventSubscriber, type EventItem } from '../../../src/runtime/event-subscriber.js';

const ev = (seq: number, rolloutId = 'a'): RolloutEvent => ({ type: 'rollout.state', rolloutId, state: 'queued', prev: null, turn: 0, seq, rseq: seq, ts: 0 }) as RolloutEvent;
const seqs = async (s: EventSubscriber, n: number): Promise<(number | string)[]> => {
  const out: (number | string)[] = [];
  for (let i = 0; i < n; i++) {
    const v = (await s.next()).value as EventItem;
    out.push(v.type === 'gap' ? `gap ${v.from}-${v.to}` : v.seq);
  }
  return out;
};

describe('EventSubscriber', () => {
  it('ignores an event whose seq is not above the last one offered (replay and live overlap)', async () => {
    const s = new EventSubscriber({}, 10, () => undefined);
    for (const n of [1, 2, 2, 1, 3]) s.offer(ev(n), null);
    expect(await seqs(s, 3)).toEqual([1, 2, 3]);
  });

  it('holds live events during a replay and delivers them after it, minus what the replay covered', async () => {
    const s = new EventSubscriber({}, 10, () => undefined);
    s.hold();
    s.live(ev(5), null);
    s.live(ev(6), null);
    s.offer(ev(4), null);
    s.offer(ev(5), null);
    s.release(3);
    s.live(ev(7), null);
    expect(await seqs(s, 4)).toEqual([4, 5, 6, 7]);
  });

  it('drops nothing at or below the floor given at release', async () => {
    const s = new EventSubscriber({}, 10, () => undefined);
    s.release(8);
    s.offer(ev(8), null);
    s.offer(ev(9), null);
    expect(await seqs(s, 1)).toEqual([9]);
  });

  it('grows its buffer past the initial slots up to the cap, then drops the oldest as one merged gap', async () => {
    const s = new EventSubscriber({}, 100, () => undefined);
    for (let n = 1; n <= 130; n++) s.offer(ev(n), null);
    expect(await seqs(s, 3)).toEqual(['gap 1-30', 31, 32]);
    expect((await seqs(s, 98)).at(-1)).toBe(130);
  });

  it('yields a gap to a waiting reader at once', async () => {
    const s = new EventSubscriber({}, 4, () => undefined);
    const next = s.next();
    s.gap(1, 5);
    expect((await next).value).toEqual({ type: 'gap', from: 1, to: 5 });
  });

  it('filters by rollout and group, and detaches once when it ends', async () => {
    let detached = 0;
    const s = new EventSubscriber({ rolloutId: 'b', groupId: 'g' }, 4, () => detached++);
    s.offer(ev(1, 'a'), 'g');
    s.offer(ev(2, 'b'), null);
    s.offer(ev(3, 'b'), 'g');
    expect(await seqs(s, 1)).toEqual([3]);
    const waiting = s.next();
    s.end();
    s.end();
    expect(await waiting).toEqual({ value: undefined, done: true });
    expect(detached).toBe(1);
  });
});
