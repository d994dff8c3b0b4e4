import { every, systemClock, type Clock } from '../clock.js';
import { CancelledError } from '../errors.js';
import type { Sandbox, SandboxProvider, SandboxSpec } from './sandbox.js';

/** What {@link withWarmPools} reads of the sandbox options. */
export interface WarmPoolOptions {
  /** Image name (as instances give it) → how many sandboxes to keep started. */
  warmPools: Readonly<Record<string, number>>;
  /** A pool with no take for this long is drained until its next take. */
  warmPoolIdleMs: number;
}

/** Counters of one pool, for tests and metrics. */
export interface WarmPoolStats {
  image: string;
  ready: number;
  starting: number;
  hits: number;
  misses: number;
  drained: boolean;
}

interface Pool {
  image: string;
  spec: SandboxSpec;
  target: number;
  ready: Sandbox[];
  starting: number;
  hits: number;
  misses: number;
  lastTakeAt: number;
  drained: boolean;
  /** Consecutive failed starts: refilling pauses after 3 until the next take. */
  failures: number;
}

/** A provider with warm pools: `create` may hand out an already started sandbox. */
export type WithWarmPools<P> = P & { warmPoolStats(): WarmPoolStats[] };

/**
 * Wraps a provider with warm pools ("runtime pooling"): for an image listed in
 * `options.warmPools`, K sandboxes of exactly the spec a rollout asked for (image, files,
 * setup, env: one pool per distinct spec, learned from the first request) are kept started, so
 * the next INIT with that spec takes one at once instead of starting one. A pooled sandbox is
 * handed out once and never returned; the pool refills in the background after every take and
 * is drained (sandboxes closed) after `warmPoolIdleMs` without a take. The first request of a
 * spec starts its pool and is served cold.
 *
 * With no pools configured the provider is returned unchanged. `close()` closes the pooled
 * sandboxes, then the provider.
 */
export function withWarmPools<P extends SandboxProvider>(inner: P, options: WarmPoolOptions, clock: Clock = systemClock): WithWarmPools<P> {
  const now = (): number => clock.now();
  const configured = Object.entries(options.warmPools).filter(([, k]) => k > 0);
  if (configured.length === 0) return Object.assign(inner, { warmPoolStats: () => [] });
  const targets = new Map(configured);
  const pools = new Map<string, Pool>();
  let closed = false;

  const refill = (pool: Pool): void => {
    while (!closed && !pool.drained && pool.failures < 3 && pool.ready.length + pool.starting < pool.target) {
      pool.starting++;
      inner.create(pool.spec, { rolloutId: `warm-pool:${pool.image}` }).then(
        (sb) => {
          pool.starting--;
          pool.failures = 0;
          // Sandbox.close never rejects (its contract); nobody waits on a pool's leftover.
          if (closed || pool.drained) void sb.close();
          else pool.ready.push(sb);
        },
        () => {
          pool.starting--;
          pool.failures++;
          refill(pool);
        },
      );
    }
  };

  const drain = (pool: Pool): void => {
    pool.drained = true;
    const all = pool.ready.splice(0);
    // Sandbox.close never rejects (its contract); a drained pool's sandboxes have no caller to wait.
    for (const sb of all) void sb.close();
  };

  // One sweep for every pool; every() unrefs it, so it never keeps a process alive.
  const stopSweep = every(clock, Math.max(1000, Math.floor(options.warmPoolIdleMs / 4)), () => {
    const t = now();
    for (const pool of pools.values()) if (!pool.drained && t - pool.lastTakeAt > options.warmPoolIdleMs) drain(pool);
  });

  const wrapped = Object.create(inner) as WithWarmPools<P>;
  wrapped.create = async (spec: SandboxSpec, opts: { rolloutId: string; signal?: AbortSignal | undefined }): Promise<Sandbox> => {
    const target = spec.image !== undefined ? targets.get(spec.image) : undefined;
    // A proxied sandbox belongs to one rollout (its socket and token): never pooled.
    if (target === undefined || closed || spec.llmProxy) return inner.create(spec, opts);
    if (opts.signal?.aborted) throw new CancelledError();
    const key = stableKey(spec);
    let pool = pools.get(key);
    if (!pool) {
      pool = { image: spec.image!, spec: structuredClone(spec), target, ready: [], starting: 0, hits: 0, misses: 0, lastTakeAt: now(), drained: false, failures: 0 };
      pools.set(key, pool);
    }
    pool.lastTakeAt = now();
    pool.drained = false;
    pool.failures = 0;
    const sb = pool.ready.shift();
    refill(pool);
    if (sb) {
      pool.hits++;
      return sb;
    }
    pool.misses++;
    return inner.create(spec, opts);
  };
  wrapped.close = async (): Promise<void> => {
    closed = true;
    stopSweep();
    await Promise.all([...pools.values()].flatMap((p) => p.ready.splice(0).map((sb) => sb.close())));
    await inner.close();
  };
  wrapped.warmPoolStats = () => [...pools.values()].map((p) => ({ image: p.image, ready: p.ready.length, starting: p.starting, hits: p.hits, misses: p.misses, drained: p.drained }));
  return wrapped;
}

/** JSON with sorted keys: two equal specs give one key whatever their key order. */
function stableKey(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(stableKey).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v)
      .sort()
      .filter((k) => (v as Record<string, unknown>)[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${stableKey((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v);
}
