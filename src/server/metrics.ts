import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { RolloutEvent } from '../protocol/events.js';
import type { ServiceRuntime } from './service-runtime.js';

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
      case 'llm.end':
        this.llmSeconds.observe({ backend: ev.backendId }, ev.latencyMs / 1000);
        this.tokens.inc({ kind: 'prompt' }, ev.promptTokens);
        this.tokens.inc({ kind: 'output' }, ev.outputTokens);
        break;
      case 'tool.result':
        this.actionSeconds.observe({ tool: ev.name }, ev.latencyMs / 1000);
        break;
      case 'rollout.result':
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

  /** The Prometheus text exposition. */
  async text(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
