import { afterEach, describe, expect, it } from 'vitest';
import { rig, task, statesOf, type Rig } from './helpers.js';

let r: Rig | undefined;
afterEach(async () => {
  await r?.rt.close();
  r = undefined;
});

describe('createRuntime', () => {
  it('runs a three-turn rollout to completed with a reward and a token trajectory', async () => {
    r = rig({ runtime: { events: { retain: 1000 } } });
    const h = r.rt.submit(task({ expect: { path: 'a.txt', content: 'hi\n' } }));
    await r.clock.advance(1);
    const res = await h.result;
    expect(res.outcome).toBe('completed');
    expect(res.finish).toBe('finish_tool');
    expect(res.reward).toBe(1);
    expect(res.resolved).toBe(true);
    expect(res.attempts).toBe(1);
    expect(res.trajectory.turns).toHaveLength(3);
    // With free slots the rollout never stops in waitingRun / waitingEval.
    expect(await statesOf(r.rt, h.id)).toEqual([
      'queued', 'initializing', 'llmCalling', 'acting', 'llmCalling', 'acting', 'llmCalling', 'acting', 'evaluating', 'done',
    ]);
  });

  it('closes every sandbox and leaves no timer after close', async () => {
    r = rig();
    const h = r.rt.submit(task());
    await r.clock.advance(1);
    await h.result;
    await r.rt.close();
    expect(r.sandboxes.live).toBe(0);
    expect(r.clock.pending).toBe(0);
    expect(r.rt.status().state).toBe('closed');
  });
});
