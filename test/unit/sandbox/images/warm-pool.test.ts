import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../../src/clock.js';
import { withWarmPools } from '../../../../src/sandbox/warm-pool.js';
import type { Sandbox, SandboxProvider, SandboxSpec } from '../../../../src/sandbox/sandbox.js';

/** A provider whose sandboxes only record that they were closed; starts resolve on the next tick. */
function fakeProvider(opts: { fail?: () => boolean } = {}) {
  const made: { id: string; spec: SandboxSpec; rolloutId: string; closed: boolean }[] = [];
  let closed = false;
  const provider: SandboxProvider = {
    async create(spec, o) {
      await Promise.resolve();
      if (opts.fail?.()) throw new Error('start failed');
      const rec = { id: `sb-${made.length}`, spec, rolloutId: o.rolloutId, closed: false };
      made.push(rec);
      return { id: rec.id, close: async () => void (rec.closed = true) } as unknown as Sandbox;
    },
    async close() {
      closed = true;
    },
  };
  return { provider, made, isClosed: () => closed };
}

const flush = async (): Promise<void> => {
  for (let i = 0; i < 10; i++) await Promise.resolve();
};

describe('withWarmPools', () => {
  it('returns the provider unchanged when no pool is configured', () => {
    const { provider } = fakeProvider();
    expect(withWarmPools(provider, { warmPools: {}, warmPoolIdleMs: 1000 })).toBe(provider);
  });

  it('serves the first request cold, keeps K started, hands each pooled sandbox out once and refills', async () => {
    const { provider, made } = fakeProvider();
    const p = withWarmPools(provider, { warmPools: { img: 2 }, warmPoolIdleMs: 60_000 });
    const spec = { image: 'img', env: { A: '1' } };
    const first = await p.create(spec, { rolloutId: 'r0' });
    expect(made.find((m) => m.id === first.id)!.rolloutId).toBe('r0');
    await flush();
    expect(p.warmPoolStats()).toEqual([{ image: 'img', ready: 2, starting: 0, hits: 0, misses: 1, drained: false }]);
    const a = await p.create({ env: { A: '1' }, image: 'img' }, { rolloutId: 'r1' }); // same spec, other key order
    const b = await p.create(spec, { rolloutId: 'r2' });
    expect(new Set([first.id, a.id, b.id]).size).toBe(3);
    expect(made.find((m) => m.id === a.id)!.rolloutId).toBe('warm-pool:img');
    await flush();
    expect(p.warmPoolStats()[0]).toMatchObject({ ready: 2, hits: 2 });
    // Another image, or another spec of the same image, is not served from this pool.
    await p.create({ image: 'other' }, { rolloutId: 'r3' });
    await p.create({ image: 'img', env: { A: '2' } }, { rolloutId: 'r4' });
    expect(p.warmPoolStats().map((s) => s.hits)).toEqual([2, 0]);
    await p.close();
  });

  it('drains an idle pool (closing its sandboxes) and fills it again on the next take', async () => {
    const clock = new ManualClock(0);
    const { provider, made } = fakeProvider();
    const p = withWarmPools(provider, { warmPools: { img: 3 }, warmPoolIdleMs: 10_000 }, clock);
    await p.create({ image: 'img' }, { rolloutId: 'r0' });
    await flush();
    expect(p.warmPoolStats()[0]!.ready).toBe(3);
    // Sweeps every 2.5 s: at 10 s the pool is exactly at its idle limit, at 12.5 s past it.
    await clock.advance(10_000);
    expect(p.warmPoolStats()[0]).toMatchObject({ ready: 3, drained: false });
    await clock.advance(2_500);
    expect(p.warmPoolStats()[0]).toMatchObject({ ready: 0, drained: true });
    expect(made.filter((m) => m.rolloutId.startsWith('warm-pool') && m.closed)).toHaveLength(3);
    await p.create({ image: 'img' }, { rolloutId: 'r1' });
    await flush();
    expect(p.warmPoolStats()[0]).toMatchObject({ ready: 3, drained: false });
    await p.close();
  });

  it('stops refilling after three failed starts in a row, and close closes pooled sandboxes then the provider', async () => {
    let failing = true;
    const { provider, made, isClosed } = fakeProvider({ fail: () => failing });
    const p = withWarmPools(provider, { warmPools: { img: 2 }, warmPoolIdleMs: 60_000 });
    await expect(p.create({ image: 'img' }, { rolloutId: 'r0' })).rejects.toThrow('start failed');
    await flush();
    expect(p.warmPoolStats()[0]).toMatchObject({ ready: 0, starting: 0 });
    failing = false;
    await p.create({ image: 'img' }, { rolloutId: 'r1' });
    await flush();
    expect(p.warmPoolStats()[0]!.ready).toBe(2);
    await p.close();
    expect(made.filter((m) => m.rolloutId.startsWith('warm-pool')).every((m) => m.closed)).toBe(true);
    expect(isClosed()).toBe(true);
  });
});
