import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { RolloutEvent } from '../protocol/events.js';
import type { ServiceRuntime } from './service-runtime.js';
import type { ForkPoolStats } from '../protocol/sandbox.js';

const REWARD_BUCKETS = [-1, 0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 2];
const TOKEN_BUCKETS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768];
/** Live rollouts and open groups tracked for labels; beyond this the oldest are forgotten. */
const MAX_TRACKED = 100_000;

const SECONDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];

/**
 * Prometheus metrics of the service, in their own {@link Registry} (never the global default, so
 * two services in one process — tests, benches — do not collide).
 *
 * Counters and histograms are fed from the runtime's event stream by {@link ServiceMetrics.observe}
 * (called by a background firehose subscription, so a slow scrape never touches a rollout); gauges
 * (queue depth, stage occupancy, backend load) are read from `status()` / `listBackends()` only
 * when scraped.
 */
export class ServiceMetrics {
  readonly registry = new Registry();
  private runtime: ServiceRuntime | null = null;
  private readonly outcomes: Counter<'outcome'>;
  private readonly stageSeconds: Histogram<'stage'>;
  private readonly actionSeconds: Histogram<'tool'>;
  private readonly llmSeconds: Histogram<'backend'>;
  private readonly tokens: Counter<'kind'>;
  private readonly eventGaps: Counter;
  private readonly rewards: Histogram<'data_source'>;
  private readonly groups: Counter<'signal'>;
  private readonly tokensPerTurn: Histogram;
  private readonly truncations: Counter<'finish'>;
  private readonly violations: Counter<'kind' | 'data_source'>;
  /** Live rollouts' data source and group, from `rollout.submitted` (results do not carry them). */
  private readonly live = new Map<string, { dataSource: string; groupId: string | null }>();
  /** Open groups: members submitted, members ended, and whether the ended rewards still agree. */
  private readonly openGroups = new Map<string, { submitted: number; ended: number; first: number | null; differ: boolean }>();
  /** The fork-pool counters of the scrape in progress ({@link poolStats}). */
  private poolScrape: Promise<ForkPoolStats | null> | null = null;
  readonly httpRequests: Counter<'route' | 'status'>;
  readonly wsConnections: Gauge;
  readonly wsDropped: Counter<'reason'>;

  constructor() {
    const registers = [this.registry];
    const self = this;
    this.outcomes = new Counter({ name: 'rollout_outcomes_total', help: 'Rollouts ended, by outcome', labelNames: ['outcome'], registers });
    this.stageSeconds = new Histogram({ name: 'rollout_stage_seconds', help: 'Time spent per stage (queue, init, run, eval) of ended rollouts', labelNames: ['stage'], buckets: SECONDS, registers });
    this.actionSeconds = new Histogram({ name: 'rollout_action_seconds', help: 'Tool call latency', labelNames: ['tool'], buckets: SECONDS, registers });
    this.llmSeconds = new Histogram({ name: 'rollout_llm_seconds', help: 'LLM call latency', labelNames: ['backend'], buckets: SECONDS, registers });
    this.tokens = new Counter({ name: 'rollout_tokens_total', help: 'Tokens through LLM calls', labelNames: ['kind'], registers });
    this.eventGaps = new Counter({ name: 'rollout_metrics_event_gaps_total', help: 'Events the metrics subscriber missed (its buffer overflowed)', registers });
    this.rewards = new Histogram({ name: 'rollout_reward', help: 'Rewards of evaluated rollouts, by data source', labelNames: ['data_source'], buckets: REWARD_BUCKETS, registers });
    this.groups = new Counter({ name: 'rollout_groups_total', help: 'Ended GRPO groups by learning signal: none (every reward equal, advantage 0) or some', labelNames: ['signal'], registers });
    this.tokensPerTurn = new Histogram({ name: 'rollout_tokens_per_turn', help: 'Tokens sampled per assistant turn', buckets: TOKEN_BUCKETS, registers });
    this.truncations = new Counter({ name: 'rollout_truncations_total', help: 'Truncated rollouts by why (max_iterations, context_full, length)', labelNames: ['finish'], registers });
    this.violations = new Counter({ name: 'rollout_integrity_violations_total', help: 'Integrity monitor violations (#27) by kind and data source', labelNames: ['kind', 'data_source'], registers });
    this.httpRequests = new Counter({ name: 'rollout_http_requests_total', help: 'HTTP requests by route and status', labelNames: ['route', 'status'], registers });
    this.wsConnections = new Gauge({ name: 'rollout_ws_connections', help: 'Open WebSocket connections', registers });
    this.wsDropped = new Counter({ name: 'rollout_ws_dropped_total', help: 'Events not sent to slow WebSocket clients, and clients closed', labelNames: ['reason'], registers });
    new Gauge({
      name: 'rollout_queue_depth',
      help: 'Rollouts admitted and waiting for an INIT slot',
      registers,
      collect() {
        this.set(self.runtime?.status().queued ?? 0);
      },
    });
    new Gauge({
      name: 'rollout_live',
      help: 'Rollouts not yet ended',
      registers,
      collect() {
        this.set(self.runtime?.status().live ?? 0);
      },
    });
    new Gauge({
      name: 'rollout_stage_occupancy',
      help: 'Stage slots by stage and kind (active, waiting, limit)',
      labelNames: ['stage', 'kind'],
      registers,
      collect() {
        this.reset();
        const s = self.runtime?.status();
        if (!s) return;
        for (const stage of ['init', 'run', 'eval'] as const) {
          const st = s.stages[stage];
          this.set({ stage, kind: 'active' }, st.active);
          this.set({ stage, kind: 'waiting' }, st.waiting);
          this.set({ stage, kind: 'limit' }, st.limit);
        }
      },
    });
    new Gauge({
      name: 'rollout_backend_in_flight',
      help: 'LLM requests in flight per backend',
      labelNames: ['backend', 'state'],
      registers,
      collect() {
        this.reset();
        for (const b of self.runtime?.listBackends?.() ?? []) this.set({ backend: b.id, state: b.state }, b.inFlight);
      },
    });
    // 1 for a backend out of selection because its probes or calls fail (state `degraded`,
    // also one that never answered): the alerting signal, without knowing the state names.
    new Gauge({
      name: 'rollout_backend_down',
      help: 'Backends failing their health probes (1 = down)',
      labelNames: ['backend'],
      registers,
      collect() {
        this.reset();
        for (const b of self.runtime?.listBackends?.() ?? []) this.set({ backend: b.id }, b.state === 'degraded' ? 1 : 0);
      },
    });
    // The fork pools of the sandbox hosts (#26): how many branches wait parked, and whether forks
    // find them there. Without fork pools (an injected provider, a gateway) the labelled series
    // have no sample and the discard count reads 0.
    new Gauge({
      name: 'rollout_fork_pool_branches',
      help: 'Fork branches in the sandbox hosts\' fork pools, by state (parked: ready for a fork; starting: being launched)',
      labelNames: ['state'],
      registers,
      async collect() {
        // Reset after the await: two scrapes at once must not add their counts up.
        const st = await self.poolStats();
        this.reset();
        if (!st) return;
        this.set({ state: 'parked' }, st.parked);
        this.set({ state: 'starting' }, st.starting);
      },
    });
    new Counter({
      name: 'rollout_fork_pool_takes_total',
      help: 'Fork branches by where they came from: the fork pool (hit) or launched by the fork itself (miss); per host since it started',
      labelNames: ['result'],
      registers,
      async collect() {
        const st = await self.poolStats();
        this.reset();
        if (!st) return;
        this.inc({ result: 'hit' }, st.hits);
        this.inc({ result: 'miss' }, st.misses);
      },
    });
    new Counter({
      name: 'rollout_fork_pool_discarded_total',
      help: 'Parked fork branches found dead or expired and closed instead of handed out',
      registers,
      async collect() {
        const st = await self.poolStats();
        this.reset();
        if (st) this.inc(st.discarded);
      },
    });
    new Gauge({
      name: 'rollout_backend_served',
      help: 'LLM requests served per backend',
      labelNames: ['backend'],
      registers,
      collect() {
        this.reset();
        for (const b of self.runtime?.listBackends?.() ?? []) this.set({ backend: b.id }, b.served);
      },
    });
  }

  /**
   * The sandbox hosts' fork pools (#26), asked once per scrape: the three series' collects run
   * together (prom-client gathers a registry's metrics concurrently) and share one round of
   * `host.stats` requests. Null without pools or when the runtime cannot tell.
   */
  private poolStats(): Promise<ForkPoolStats | null> {
    this.poolScrape ??= (async () => {
      try {
        return (await this.runtime?.forkPoolStats?.()) ?? null;
      } catch {
        // Not expected (the host provider leaves out a host that does not answer, and a closed one
        // sums no host), but a runtime of another kind must not fail the whole scrape.
        return null;
      } finally {
        this.poolScrape = null;
      }
    })();
    return this.poolScrape;
  }

  /** The runtime whose status the gauges read (null while stopped). */
  setRuntime(runtime: ServiceRuntime | null): void {
    this.runtime = runtime;
  }

  /** Folds one event (or gap) of the firehose into the counters. O(1). */
  observe(ev: RolloutEvent | { type: 'gap'; from: number; to: number }): void {
    switch (ev.type) {
      case 'gap':
        this.eventGaps.inc(Math.max(0, ev.to - ev.from + 1));
        break;
      case 'rollout.submitted':
        this.submitted(ev.rolloutId, ev.dataSource, ev.groupId ?? null, ev.attempt);
        break;
      case 'llm.end':
        this.tokensPerTurn.observe(ev.outputTokens);
        this.llmSeconds.observe({ backend: ev.backendId }, ev.latencyMs / 1000);
        this.tokens.inc({ kind: 'prompt' }, ev.promptTokens);
        this.tokens.inc({ kind: 'output' }, ev.outputTokens);
        break;
      case 'tool.result':
        this.actionSeconds.observe({ tool: ev.name }, ev.latencyMs / 1000);
        break;
      case 'rollout.result':
        if (ev.violations) {
          const dataSource = this.live.get(ev.rolloutId)?.dataSource ?? 'unknown';
          for (const [kind, n] of Object.entries(ev.violations)) this.violations.inc({ kind, data_source: dataSource }, n);
        }
        this.ended(ev.rolloutId, ev.reward);
        if (ev.outcome === 'truncated') this.truncations.inc({ finish: ev.finish ?? 'unknown' });
        this.outcomes.inc({ outcome: ev.outcome });
        this.stageSeconds.observe({ stage: 'queue' }, ev.timing.queueMs / 1000);
        this.stageSeconds.observe({ stage: 'init' }, ev.timing.initMs / 1000);
        this.stageSeconds.observe({ stage: 'run' }, ev.timing.runMs / 1000);
        this.stageSeconds.observe({ stage: 'eval' }, ev.timing.evalMs / 1000);
        break;
      default:
        break;
    }
  }

  private submitted(id: string, dataSource: string, groupId: string | null, attempt: number | undefined): void {
    // A retry is submitted again under the same id: the same member, not a new one.
    const again = this.live.has(id) || (attempt ?? 1) > 1;
    this.live.set(id, { dataSource, groupId });
    if (this.live.size > MAX_TRACKED) this.live.delete(this.live.keys().next().value!);
    if (groupId === null || again) return;
    const g = this.openGroups.get(groupId) ?? { submitted: 0, ended: 0, first: null, differ: false };
    g.submitted++;
    this.openGroups.set(groupId, g);
    if (this.openGroups.size > MAX_TRACKED) this.openGroups.delete(this.openGroups.keys().next().value!);
  }

  private ended(id: string, reward: number | null): void {
    const r = this.live.get(id);
    this.live.delete(id);
    if (reward !== null) this.rewards.observe({ data_source: r?.dataSource ?? 'unknown' }, reward);
    const g = r?.groupId ? this.openGroups.get(r.groupId) : undefined;
    if (!g || !r?.groupId) return;
    g.ended++;
    // A member without a reward (failed, cancelled) gives no advantage either way.
    if (reward !== null) {
      if (g.first === null) g.first = reward;
      else if (reward !== g.first) g.differ = true;
    }
    if (g.ended >= g.submitted) {
      this.groups.inc({ signal: g.differ ? 'some' : 'none' });
      this.openGroups.delete(r.groupId);
    }
  }

  /** The Prometheus text exposition. */
  async text(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
