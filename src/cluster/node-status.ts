import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { ClusterNodeStatusSchema, type ClusterNodeStatus } from '../protocol/cluster.js';
import type { RuntimeStatus } from '../runtime/runtime-api.js';
import type { ClusterKeys } from './cluster-keys.js';
import type { ClusterOptions } from './cluster-options.js';
import { systemClock } from '../clock.js';

/**
 * The gateway's picture of the cluster for `status()`: the queue's job counts plus the workers'
 * heartbeats (a node silent for 5 heartbeats counts as gone). Refreshed on the heartbeat, read
 * synchronously.
 */
export class NodeStatusBoard {
  private nodes: ClusterNodeStatus[] = [];
  private counts: Record<string, number> = {};

  private readonly redis: Redis;
  private readonly keys: ClusterKeys;
  private readonly queue: Queue;
  private readonly opts: ClusterOptions;
  private readonly now: () => number;

  /** `now`: default the system clock's. */
  constructor(o: { redis: Redis; keys: ClusterKeys; queue: Queue; opts: ClusterOptions; now?: (() => number) | undefined }) {
    this.redis = o.redis;
    this.keys = o.keys;
    this.queue = o.queue;
    this.opts = o.opts;
    this.now = o.now ?? (() => systemClock.now());
  }

  /** Jobs waiting for a worker. */
  get waiting(): number {
    return (this.counts['waiting'] ?? 0) + (this.counts['prioritized'] ?? 0) + (this.counts['delayed'] ?? 0);
  }

  /** Workers heard from recently. */
  get live(): ClusterNodeStatus[] {
    return this.nodes;
  }

  async refresh(): Promise<void> {
    const [counts, raw] = await Promise.all([this.queue.getJobCounts('waiting', 'prioritized', 'delayed', 'active'), this.redis.hgetall(this.keys.nodes)]);
    this.counts = counts;
    const cutoff = this.now() - 5 * this.opts.heartbeatMs;
    const nodes: ClusterNodeStatus[] = [];
    for (const json of Object.values(raw)) {
      try {
        const r = ClusterNodeStatusSchema.safeParse(JSON.parse(json));
        if (r.success && r.data.at >= cutoff) nodes.push(r.data);
      } catch {
        // A malformed heartbeat is a node we cannot count.
      }
    }
    this.nodes = nodes;
  }

  status(): RuntimeStatus {
    const stage = (k: 'init' | 'run' | 'eval') => ({
      active: sum(this.nodes.map((n) => n.stages[k].active)),
      waiting: sum(this.nodes.map((n) => n.stages[k].waiting)),
      limit: sum(this.nodes.map((n) => n.stages[k].limit)),
    });
    const outcomes: Record<string, number> = {};
    for (const n of this.nodes) for (const [k, v] of Object.entries(n.outcomes)) outcomes[k] = (outcomes[k] ?? 0) + v;
    return {
      state: 'running',
      queued: this.waiting + sum(this.nodes.map((n) => n.queued)),
      stages: { init: stage('init'), run: stage('run'), eval: stage('eval') },
      stuckCloses: sum(this.nodes.map((n) => (n as { stuckCloses?: number }).stuckCloses ?? 0)),
      live: this.waiting + (this.counts['active'] ?? 0),
      completed: sum(this.nodes.map((n) => n.completed)),
      outcomes,
    };
  }
}

function sum(xs: number[]): number {
  return xs.reduce((a, b) => a + b, 0);
}
