import type { Redis } from 'ioredis';
import type { BackendInfo, BackendSpec } from '../llm/llm-client.js';
import { ClusterBackendSchema, type ClusterBackend, type ClusterControl } from '../protocol/cluster.js';
import type { BackendControl } from '../server/service-runtime.js';
import type { ClusterKeys } from './cluster-keys.js';

/** Reads the registry hash; entries that do not parse are skipped. */
export async function readRegistry(redis: Redis, keys: ClusterKeys): Promise<Map<string, ClusterBackend>> {
  const raw = await redis.hgetall(keys.backends);
  const out = new Map<string, ClusterBackend>();
  for (const [id, json] of Object.entries(raw)) {
    try {
      const r = ClusterBackendSchema.safeParse(JSON.parse(json));
      if (r.success && r.data.id === id) out.set(id, r.data);
    } catch {
      // A malformed entry is ignored: it is not a backend anyone could call.
    }
  }
  return out;
}

/**
 * The gateway's side of the backend registry: one hash in Redis (backend id → registration) that
 * every gateway writes and every worker applies to its own backend pool. Calls are answered from
 * a local mirror at once (the service's routes are synchronous); the write to Redis and the
 * change notice follow, in order, on the same connection.
 */
export class GatewayBackends implements BackendControl {
  private readonly mirror = new Map<string, ClusterBackend>();
  private writes: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly redis: Redis,
    private readonly keys: ClusterKeys,
  ) {}

  /** Loads what other gateways registered before this one started. */
  async load(): Promise<void> {
    const reg = await readRegistry(this.redis, this.keys);
    this.mirror.clear();
    for (const [id, b] of reg) this.mirror.set(id, b);
  }

  /** Resolves once every write so far reached Redis. */
  flush(): Promise<unknown> {
    return this.writes;
  }

  addBackend(spec: BackendSpec): BackendInfo {
    const id = spec.id ?? spec.url;
    const b: ClusterBackend = {
      id,
      url: spec.url,
      protocol: spec.protocol,
      ...(spec.model !== undefined ? { model: spec.model } : {}),
      weightVersion: spec.weightVersion ?? null,
      state: 'active',
    };
    this.mirror.set(id, b);
    this.write((m) => m.hset(this.keys.backends, id, JSON.stringify(b)));
    return info(b);
  }

  drainBackend(id: string): boolean {
    const b = this.mirror.get(id);
    if (!b) return false;
    b.state = 'draining';
    this.write((m) => m.hset(this.keys.backends, id, JSON.stringify(b)));
    return true;
  }

  removeBackend(id: string): boolean {
    if (!this.mirror.delete(id)) return false;
    this.write((m) => m.hdel(this.keys.backends, id));
    return true;
  }

  listBackends(): BackendInfo[] {
    return [...this.mirror.values()].map(info);
  }

  setWeightVersion(version: string | number, backendId?: string): void {
    for (const b of this.mirror.values()) if (backendId === undefined || b.id === backendId) b.weightVersion = version;
    const msg: ClusterControl = { type: 'weight-version', version, ...(backendId !== undefined ? { backendId } : {}) };
    this.write((m) => {
      for (const b of this.mirror.values()) if (backendId === undefined || b.id === backendId) m.hset(this.keys.backends, b.id, JSON.stringify(b));
      m.publish(this.keys.control, JSON.stringify(msg));
    }, false);
  }

  /** Queues a MULTI of `fn`'s commands plus (by default) a `backends` change notice. */
  private write(fn: (m: ReturnType<Redis['multi']>) => unknown, notify = true): void {
    const m = this.redis.multi();
    fn(m);
    if (notify) m.publish(this.keys.control, JSON.stringify({ type: 'backends' } satisfies ClusterControl));
    // The chain must survive one failed write; the registry is re-read whole on every notice.
    this.writes = this.writes.then(() => m.exec()).catch(() => undefined);
  }
}

function info(b: ClusterBackend): BackendInfo {
  return {
    id: b.id,
    url: b.url,
    protocol: b.protocol,
    state: b.state === 'draining' ? 'draining' : 'healthy',
    inFlight: 0,
    served: 0,
    failures: 0,
    weightVersion: b.weightVersion ?? null,
    latencyMs: null,
  };
}

/**
 * A worker's side: makes its runtime's backend pool match the registry. Backends are keyed by id;
 * a changed URL or protocol is a remove + add.
 */
export function applyRegistry(rt: BackendControl, reg: Map<string, ClusterBackend>, applied: Map<string, ClusterBackend>): void {
  for (const [id, old] of applied) {
    const now = reg.get(id);
    if (!now || now.url !== old.url || now.protocol !== old.protocol || now.model !== old.model) {
      rt.removeBackend(id);
      applied.delete(id);
    }
  }
  for (const [id, b] of reg) {
    const old = applied.get(id);
    if (!old) {
      rt.addBackend({ id, url: b.url, protocol: b.protocol, ...(b.model !== undefined ? { model: b.model } : {}), weightVersion: b.weightVersion ?? null });
      if (b.state === 'draining') rt.drainBackend(id);
    } else {
      if (b.state === 'draining' && old.state !== 'draining') rt.drainBackend(id);
      // Draining is one-way in the pool: re-activating means adding it again.
      if (b.state === 'active' && old.state === 'draining') {
        rt.removeBackend(id);
        rt.addBackend({ id, url: b.url, protocol: b.protocol, ...(b.model !== undefined ? { model: b.model } : {}), weightVersion: b.weightVersion ?? null });
      }
      if ((b.weightVersion ?? null) !== (old.weightVersion ?? null) && b.weightVersion !== null && b.weightVersion !== undefined) rt.setWeightVersion?.(b.weightVersion, id);
    }
    applied.set(id, { ...b });
  }
}
