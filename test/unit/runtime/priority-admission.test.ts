import { describe, expect, it } from 'vitest';
import { rig, task } from './helpers.js';

describe('priority admission', () => {
  it('starts queued rollouts highest priority first, FIFO within one, without preempting the one running', async () => {
    const { rt, clock } = rig({ runtime: { stages: { init: 1, run: 1 }, events: { retain: 10_000 } } });
    const started: string[] = [];
    const ac = new AbortController();
    const seen = (async () => {
      for await (const ev of rt.events({ signal: ac.signal })) {
        if (ev.type === 'rollout.state' && ev.state === 'initializing') started.push(ev.rolloutId);
      }
    })().catch(() => undefined);
    const handles = [
      rt.submit(task(), {}, { id: 'first', priority: 0 }),
      rt.submit(task(), {}, { id: 'low-a', priority: 0 }),
      rt.submit(task(), {}, { id: 'high', priority: 90 }),
      rt.submit(task(), {}, { id: 'low-b', priority: 0 }),
      rt.submit(task(), {}, { id: 'mid', priority: 40 }),
    ];
    await clock.advance(1);
    await Promise.all(handles.map((h) => h.result));
    await expect.poll(() => started.length).toBe(5);
    ac.abort();
    await seen;
    await rt.close();
    expect(started).toEqual(['first', 'high', 'mid', 'low-a', 'low-b']);
    for (const h of handles) expect((await h.result).outcome).toBe('completed');
  });
});
