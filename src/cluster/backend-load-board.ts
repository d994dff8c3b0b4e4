import type { Redis } from 'ioredis';
import type { SharedBackendLoad } from '../llm/shared-backend-load.js';
import { ClusterBackendLoadSchema } from '../protocol/cluster.js';
import type { ClusterKeys } from './cluster-keys.js';
import { every, systemClock, type Clock } from '../clock.js';

/**
 * One tick, atomically, on Redis's own clock (so clock skew between machines cannot keep a dead
 * node's load alive): write this node's loads with an expiry, drop every entry past its expiry,
 * answer the others'. Entries are `<expiresAtMs>|<json>` in one hash (field = node id).
 * KEYS[1] load hash; ARGV[1] node id, ARGV[2] loads JSON ('' = none: delete the entry), ARGV[3] ttl ms.
 */
const TICK_LUA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], tostring(now + tonumber(ARGV[3])) .. '|' .. ARGV[2])
end
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local node, v = all[i], all[i + 1]
  local bar = string.find(v, '|', 1, true)
  local exp = bar and tonumber(string.sub(v, 1, bar - 1))
  if not exp or exp <= now then
    redis.call('HDEL', KEYS[1], node)
  elseif node ~= ARGV[1] then
    out[#out + 1] = string.sub(v, bar + 1)
  end
end
return out
`;

type TickingRedis = Redis & { rrLoadTick(key: string, node: string, loads: string, ttlMs: string): Promise<string[]> };

/** Timing of a {@link BackendLoadBoard}. */
export interface BackendLoadBoardOptions {
  redis: Redis;
  keys: ClusterKeys;
  /** This node's id: its loads are published under it, and its own are not counted as others'. */
  nodeId: string;
  /** Where a failed tick is reported. Default: nowhere. */
  log?: ((line: string) => void) | undefined;
  /** Default the system clock. */
  clock?: Clock | undefined;
  /** Period of the tick (publish own loads, learn the others'). */
  intervalMs: number;
  /** How long a node's published loads count after its last tick: a SIGKILLed node's load is gone after at most this + one tick. */
  ttlMs: number;
}

/**
 * The cluster's {@link SharedBackendLoad}: each worker's in-flight calls per backend, shared
 * through one Redis hash so the least-loaded heaps of all workers see each other's load.
 *
 * Why periodic publishing rather than INCR/DECR around each call: the pick stays an in-memory
 * heap operation (an LLM call never waits on Redis), Redis sees one small script per node per
 * tick whatever the call rate, and a node that dies cannot leave a counter incremented — its
 * entry simply expires (`ttlMs`, judged on Redis's clock). The price is staleness of at most
 * one tick (default 250 ms), during which two nodes may still pick the same backend; with LLM
 * calls lasting seconds that is a small share of the load. The key a worker sorts on is its own
 * exact count + the others' last-known count.
 */
export class BackendLoadBoard implements SharedBackendLoad {
  private readonly local = new Map<string, number>();
  private remoteLoads = new Map<string, number>();
  private readonly listeners: (() => void)[] = [];
  private stopTicking: (() => void) | null = null;
  private ticking: Promise<void> | null = null;
  private stopped = false;

  private readonly redis: Redis;
  private readonly keys: ClusterKeys;
  private readonly nodeId: string;
  private readonly log: (line: string) => void;
  private readonly clock: Clock;

  constructor(private readonly options: BackendLoadBoardOptions) {
    const redis = (this.redis = options.redis);
    this.keys = options.keys;
    this.nodeId = options.nodeId;
    this.log = options.log ?? (() => undefined);
    this.clock = options.clock ?? systemClock;
    if (!('rrLoadTick' in redis)) redis.defineCommand('rrLoadTick', { numberOfKeys: 1, lua: TICK_LUA });
  }

  setLocal(backendId: string, inFlight: number): void {
    if (inFlight > 0) this.local.set(backendId, inFlight);
    else this.local.delete(backendId);
  }

  remote(backendId: string): number {
    return this.remoteLoads.get(backendId) ?? 0;
  }

  onRemoteChange(fn: () => void): void {
    this.listeners.push(fn);
  }

  /** Starts ticking; resolves after the first tick, so a new worker knows the others' load before its first pick. */
  start(): Promise<void> {
    if (this.stopTicking || this.stopped) return Promise.resolve();
    this.stopTicking = every(this.clock, this.options.intervalMs, () => void this.tick());
    return this.tick();
  }

  /**
   * One publish-and-learn round trip; skipped while the previous one still waits (Redis
   * restarting). Resolves when done; never throws.
   */
  tick(): Promise<void> {
    this.ticking ??= this.roundTrip().finally(() => {
      this.ticking = null;
    });
    return this.ticking;
  }

  private async roundTrip(): Promise<void> {
    const mine = this.local.size > 0 ? JSON.stringify(Object.fromEntries(this.local)) : '';
    let others: string[];
    try {
      others = await (this.redis as TickingRedis).rrLoadTick(this.keys.load, this.nodeId, mine, String(this.options.ttlMs));
    } catch (err) {
      if (!this.stopped) this.log(`backend load: ${(err as Error).message}`);
      return;
    }
    if (this.stopped) return;
    const sums = new Map<string, number>();
    for (const json of others) {
      let parsed;
      try {
        parsed = ClusterBackendLoadSchema.safeParse(JSON.parse(json));
      } catch {
        continue;
      }
      if (!parsed.success) continue;
      for (const [id, n] of Object.entries(parsed.data)) sums.set(id, (sums.get(id) ?? 0) + n);
    }
    if (sameLoads(sums, this.remoteLoads)) return;
    this.remoteLoads = sums;
    for (const fn of this.listeners) fn();
  }

  /** Stops ticking and withdraws this node's entry (a node that is killed instead just expires). */
  async close(): Promise<void> {
    this.stopTicking?.();
    await this.ticking;
    this.stopped = true;
    // Best effort on the way out: a stale load entry ages out (readers ignore entries past their TTL).
    await this.redis.hdel(this.keys.load, this.nodeId).catch(() => undefined);
  }
}

function sameLoads(a: Map<string, number>, b: Map<string, number>): boolean {
  if (a.size !== b.size) return false;
  for (const [k, v] of a) if (b.get(k) !== v) return false;
  return true;
}
