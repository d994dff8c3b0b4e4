import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/clock.js';
import type { BranchFs, BranchGate, GatedLaunch } from '../../../src/sandbox/branch-fs.js';
import { ForkPool } from '../../../src/sandbox/fork-pool.js';

/**
 * ForkPool's bookkeeping (src/sandbox/fork-pool.ts) over launches of its own making: each a
 * "shell" whose start fails when its gate is refused (as a real gated shell exits 97) or when the
 * test kills it. The real launches are exercised in test/integration/fork/sandbox-fork-pool.test.ts.
 */

interface Fake {
  n: number;
  launch: GatedLaunch<{ close(): Promise<void> }>;
  alive: boolean;
  refused: boolean;
  kill(): void;
}

function launcher(): { launch: (n: number) => Promise<Array<GatedLaunch<{ close(): Promise<void> }>>>; made: Fake[]; batches: number[] } {
  const made: Fake[] = [];
  const batches: number[] = [];
  let seq = 0;
  const one = (): Fake => {
    let reject!: (e: Error) => void;
    const start = new Promise<{ close(): Promise<void> }>((_, rej) => (reject = rej));
    const f: Fake = {
      n: ++seq,
      alive: true,
      refused: false,
      kill: () => {
        f.alive = false;
        reject(new Error('shell died'));
      },
      launch: {
        // A directory that never existed: its removal finds nothing to do.
        dir: `/nonexistent/fork-pool-test/${seq}`,
        files: {} as BranchFs,
        gate: {
          open: () => undefined,
          refuse: () => {
            f.refused = true;
            f.kill();
          },
          close: () => undefined,
        } as unknown as BranchGate,
        hold: { snapshot: null, released: false, alive: () => f.alive },
        stateFile: '',
        start,
      },
    };
    return f;
  };
  return {
    made,
    batches,
    launch: (n) => {
      batches.push(n);
      const fakes = Array.from({ length: n }, one);
      made.push(...fakes);
      return Promise.resolve(fakes.map((f) => f.launch));
    },
  };
}

const settle = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('ForkPool', () => {
  it('fills a configuration to its size in one batch after a fork, then hands out the oldest first, counting hits and misses', async () => {
    const clock = new ManualClock(0);
    const pool = new ForkPool<{ close(): Promise<void> }>({ size: 3, idleMs: 60_000 }, clock);
    expect(pool.take('k', 2)).toEqual([]);
    const l = launcher();
    pool.fill('k', l.launch);
    await settle();
    expect(l.batches).toEqual([3]);
    expect(pool.take('other', 1)).toEqual([]);
    const got = pool.take('k', 2);
    expect(got).toEqual([l.made[0]!.launch, l.made[1]!.launch]);
    expect(pool.stats()).toMatchObject({ parked: 1, hits: 2, misses: 3 });
    // The next fill tops it up with what was taken.
    pool.fill('k', l.launch);
    await settle();
    expect(l.batches).toEqual([3, 2]);
    expect(pool.stats().parked).toBe(3);
    await pool.close();
  });

  it('never hands out a parked branch that died: one whose start failed is dropped and replaced, one whose processes are gone is skipped at the take', async () => {
    const pool = new ForkPool<{ close(): Promise<void> }>({ size: 2, idleMs: 60_000 }, new ManualClock(0));
    const l = launcher();
    pool.fill('k', l.launch);
    await settle();
    l.made[0]!.kill();
    await settle();
    expect(l.batches).toEqual([2, 1]);
    expect(pool.stats()).toMatchObject({ parked: 2, discarded: 1 });
    // Dead without its start having failed yet: the probe at the take catches it.
    l.made[1]!.alive = false;
    const got = pool.take('k', 2);
    expect(got).toEqual([l.made[2]!.launch]);
    expect(l.made[1]!.refused).toBe(true);
    await pool.close();
  });

  it('skips a branch parked longer than idleMs at the take, and closes a configuration with no fork for idleMs (within a sweep period)', async () => {
    const clock = new ManualClock(0);
    const pool = new ForkPool<{ close(): Promise<void> }>({ size: 1, idleMs: 10_000 }, clock);
    const l = launcher();
    pool.fill('k', l.launch);
    await settle();
    await clock.advance(6000);
    pool.fill('k', l.launch); // a fork at 6 s: the configuration stays
    await settle();
    await clock.advance(5000);
    expect(pool.stats()).toMatchObject({ keys: 1, parked: 1 });
    // Parked 11 s > idleMs: not handed out.
    expect(pool.take('k', 1)).toEqual([]);
    expect(l.made[0]!.refused).toBe(true);
    pool.fill('k', l.launch);
    await settle();
    expect(pool.stats().parked).toBe(1);
    // No fork for idleMs and a sweep period (idleMs / 4): the whole configuration goes.
    await clock.advance(10_000 + 2_500);
    expect(pool.stats()).toMatchObject({ keys: 0, parked: 0 });
    expect(l.made[1]!.refused).toBe(true);
    await pool.close();
  });

  it('keeps at most 4 configurations: a fifth closes the least recently forked one', async () => {
    const clock = new ManualClock(0);
    const pool = new ForkPool<{ close(): Promise<void> }>({ size: 1, idleMs: 600_000 }, clock);
    const ls = ['a', 'b', 'c', 'd', 'e'].map((k) => ({ k, l: launcher() }));
    for (const { k, l } of ls) {
      await clock.advance(1000);
      pool.fill(k, l.launch);
      await settle();
      if (k !== 'b') continue;
      await clock.advance(500);
      pool.take('a', 0); // a fork of `a` again: `b` is now the least recent
    }
    expect(pool.stats()).toMatchObject({ keys: 4, parked: 4 });
    expect(ls[1]!.l.made[0]!.refused).toBe(true);
    expect(ls[0]!.l.made[0]!.refused).toBe(false);
    await pool.close();
  });

  it('close() ends every parked branch and those still launching, and fills nothing after', async () => {
    const pool = new ForkPool<{ close(): Promise<void> }>({ size: 2, idleMs: 60_000 }, new ManualClock(0));
    const l = launcher();
    pool.fill('k', l.launch);
    await settle();
    let release!: () => void;
    const late = launcher();
    // A second configuration whose launch lands only after close() began.
    pool.fill('late', (n) => new Promise((r) => (release = () => void late.launch(n).then(r))));
    const closed = pool.close();
    release();
    await closed;
    expect([...l.made, ...late.made].every((f) => f.refused)).toBe(true);
    expect(late.made).toHaveLength(2);
    pool.fill('k', l.launch);
    expect(l.batches).toEqual([2]);
    expect(pool.enabled).toBe(false);
  });

  it('a prewarm parks min(n, size) branches of a configuration before any fork, which takes them; the fork then fills to size', async () => {
    const pool = new ForkPool<{ close(): Promise<void> }>({ size: 4, idleMs: 60_000 }, new ManualClock(0));
    const l = launcher();
    expect(pool.prewarm('k', l.launch, 2)).toBe(2);
    await settle();
    expect(l.batches).toEqual([2]);
    expect(pool.stats()).toMatchObject({ keys: 1, parked: 2, starting: 0 });
    // Asked again (a retried attempt): nothing more launched; n past size is capped at size.
    expect(pool.prewarm('k', l.launch, 2)).toBe(2);
    await settle();
    expect(l.batches).toEqual([2]);
    expect(pool.prewarm('k', l.launch, 9)).toBe(4);
    await settle();
    expect(l.batches).toEqual([2, 2]);
    expect(pool.stats().parked).toBe(4);
    const got = pool.take('k', 2);
    expect(got).toEqual([l.made[0]!.launch, l.made[1]!.launch]);
    expect(pool.stats()).toMatchObject({ hits: 2, misses: 0, parked: 2 });
    pool.fill('k', l.launch);
    await settle();
    expect(l.batches).toEqual([2, 2, 2]);
    // A prewarm never lowers a configuration a fork keeps at size.
    pool.take('k', 3);
    expect(pool.prewarm('k', l.launch, 1)).toBe(1);
    await settle();
    expect(l.batches).toEqual([2, 2, 2, 3]);
    await pool.close();
  });

  it('at 4 configurations a prewarm evicts the least recently used one but never one prewarmed and still waiting for its fork (none such: it answers 0)', async () => {
    const clock = new ManualClock(0);
    const pool = new ForkPool<{ close(): Promise<void> }>({ size: 1, idleMs: 600_000 }, clock);
    const ls = [0, 1, 2, 3].map(() => launcher());
    for (const [i, l] of ls.entries()) {
      await clock.advance(1000);
      pool.fill(`f${i}`, l.launch);
    }
    await settle();
    // Four prewarms replace the four forked configurations, oldest first.
    const pre = [0, 1, 2, 3].map(() => launcher());
    for (const [i, l] of pre.entries()) {
      await clock.advance(1000);
      expect(pool.prewarm(`p${i}`, l.launch, 1)).toBe(1);
      await settle();
      expect(ls.map((x) => x.made[0]!.refused)).toEqual(ls.map((_, j) => j <= i));
    }
    // A fifth finds only prewarmed configurations awaiting their forks: refused, nothing launched.
    const e = launcher();
    expect(pool.prewarm('e', e.launch, 1)).toBe(0);
    await settle();
    expect(e.batches).toEqual([]);
    expect(pre.every((l) => !l.made[0]!.refused)).toBe(true);
    // Once `p0` forked it may go: the next prewarm evicts it.
    await clock.advance(1000);
    pool.take('p0', 1);
    await clock.advance(1000);
    expect(pool.prewarm('e', e.launch, 1)).toBe(1);
    await settle();
    expect(pool.stats()).toMatchObject({ keys: 4 });
    expect(pre.slice(1).every((l) => !l.made[0]!.refused)).toBe(true);
    await pool.close();
  });

  it('prewarmed branches never taken are closed with their configuration after idleMs, and by close()', async () => {
    const clock = new ManualClock(0);
    const pool = new ForkPool<{ close(): Promise<void> }>({ size: 2, idleMs: 10_000 }, clock);
    const a = launcher();
    const b = launcher();
    pool.prewarm('a', a.launch, 2);
    await settle();
    await clock.advance(10_000 + 2_500);
    expect(a.made.map((f) => f.refused)).toEqual([true, true]);
    pool.prewarm('b', b.launch, 2);
    await settle();
    await pool.close();
    expect(b.made.map((f) => f.refused)).toEqual([true, true]);
    expect(pool.stats()).toMatchObject({ keys: 0, parked: 0 });
  });

  it('size 0 is disabled: no take, no fill', async () => {
    const pool = new ForkPool<{ close(): Promise<void> }>({ size: 0, idleMs: 60_000 }, new ManualClock(0));
    const l = launcher();
    pool.fill('k', l.launch);
    await settle();
    expect(pool.prewarm('k', l.launch, 2)).toBe(0);
    await settle();
    expect(l.batches).toEqual([]);
    expect(pool.enabled).toBe(false);
    await pool.close();
  });
});
