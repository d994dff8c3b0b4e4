import { Counter } from 'prom-client';
import { BufferAddRequestSchema, BufferCreateRequestSchema, BufferLeasesRequestSchema, BufferTakeRequestSchema, type BufferStats } from '../protocol/buffer.js';
import { EmptyBodySchema } from '../protocol/http.js';
import { CancelledError } from '../errors.js';
import { RolloutBuffer, type BufferedGroup, type BufferLease } from '../runtime/rollout-buffer.js';
import { checkDataSource } from './data-source.js';
import { HttpError, parseOr400 } from './http-error.js';
import { confineInstancePaths, confineSamplingPaths } from './path-roots.js';
import type { Route } from './router.js';
import type { ServiceContext } from './service-context.js';
import type { ServiceRuntime } from './service-runtime.js';

/** Buffers one service holds at once: each pins groups of rollouts, so a client cannot open them without bound. */
export const MAX_BUFFERS = 64;

interface Entry {
  buffer: RolloutBuffer;
  /** The runtime it runs on: after `/stop` + `/start` the buffer is gone (its rollouts were cancelled). */
  rt: ServiceRuntime;
}

interface BufferMetrics {
  groups: Counter<'event'>;
  cancelled: Counter;
}

const registries = new WeakMap<ServiceContext, Map<string, Entry>>();
const metricsOf = new WeakMap<ServiceContext, BufferMetrics>();

function metrics(service: ServiceContext): BufferMetrics {
  let m = metricsOf.get(service);
  if (!m) {
    const registers = [service.metrics.registry];
    m = {
      groups: new Counter({ name: 'rollout_buffer_groups_total', help: 'Rollout-buffer groups by event: delivered (taken by the trainer, or its lease acked), returned (a lease released, expired or its subscription closed: handed out again), dropped (dynamic sampling: every reward equal), stale (over max_staleness when handed out), stopped (delivered after an early stop)', labelNames: ['event'], registers }),
      cancelled: new Counter({ name: 'rollout_buffer_cancelled_members_total', help: 'Group members cancelled by the buffer (over-provisioned beyond n, or their group stopped early)', registers }),
    };
    metricsOf.set(service, m);
  }
  return m;
}

function buffers(service: ServiceContext): Map<string, Entry> {
  let m = registries.get(service);
  if (!m) registries.set(service, (m = new Map()));
  return m;
}

function running(service: ServiceContext): ServiceRuntime {
  const rt = service.runtime;
  if (!rt) throw new HttpError(503, 'STOPPED', 'the service is stopped; POST /start first');
  return rt;
}

function find(service: ServiceContext, id: string): RolloutBuffer {
  const map = buffers(service);
  const e = map.get(id);
  if (e && e.rt !== service.runtime) {
    map.delete(id);
    // The old runtime's buffer: nobody can read it any more, and a failed close of it has no one to tell.
    void e.buffer.close('the runtime was restarted');
  }
  if (!e || e.rt !== service.runtime) throw new HttpError(404, 'NOT_FOUND', `no buffer ${id}`, { issues: [{ path: 'id', message: 'unknown buffer (or the runtime was restarted since)' }] });
  return e.buffer;
}

/** The buffer's counters in the wire's snake_case. */
export function bufferStatsBody(b: RolloutBuffer): BufferStats {
  const s = b.stats();
  const o = b.options;
  return {
    id: b.id,
    groups: o.groups,
    n: o.n,
    over_provision: o.overProvision,
    order: o.order,
    dynamic_sampling: o.dynamicSampling,
    queued_prompts: s.queuedPrompts,
    in_flight: s.inFlight,
    ready: s.ready,
    leased: s.leased,
    started: s.started,
    delivered: s.delivered,
    returned: s.returned,
    dropped: s.dropped,
    stale: s.stale,
    stopped: s.stopped,
    cancelled_members: s.cancelledMembers,
    ended: s.ended,
    done: s.done,
  };
}

/**
 * A buffer's complete groups as they finish, given as `{type:'group', group}` items, then
 * `{type:'done', buffer}` once the buffer is done; for the WebSocket's buffer subscriptions.
 * Each group is leased (its `leaseId` beside the item; in the body too with `showLeaseIds`) and
 * its id kept in `leases` until the holder acks it ({@link settleBufferLeases}) and deletes it
 * there; whatever is still in `leases` when the iteration ends (the subscription closed, or
 * `signal` aborted) is released — back in line for the next taker. Ends when `signal` aborts.
 * Null when no such buffer.
 */
export function bufferItems(service: ServiceContext, id: string, signal: AbortSignal, leases: Set<string>, showLeaseIds: boolean): AsyncIterable<{ item: Record<string, unknown>; leaseId: string | null }> | null {
  let b: RolloutBuffer;
  try {
    b = find(service, id);
  } catch {
    return null;
  }
  return (async function* () {
    try {
      for (;;) {
        if (signal.aborted) throw new CancelledError('the subscription ended');
        const [l] = await b.lease(1, { signal });
        if (!l) break;
        leases.add(l.leaseId);
        yield { item: { type: 'group', group: showLeaseIds ? leasedBody(l) : groupBody(l.group) }, leaseId: l.leaseId };
      }
      yield { item: { type: 'done', buffer: bufferStatsBody(b) }, leaseId: null };
    } catch (e) {
      if (!(e instanceof CancelledError)) yield { item: { type: 'error', error: { code: (e as { code?: string }).code ?? 'INTERNAL', message: (e as Error).message } }, leaseId: null };
    } finally {
      if (leases.size > 0) b.release([...leases]);
      leases.clear();
    }
  })();
}

/** Acks (or, `release`, gives back) leases of buffer `id` for a WebSocket subscription; null when no such buffer. */
export function settleBufferLeases(service: ServiceContext, id: string, leaseIds: readonly string[], how: 'ack' | 'release'): { done: string[]; unknown: string[] } | null {
  let b: RolloutBuffer;
  try {
    b = find(service, id);
  } catch {
    return null;
  }
  return how === 'ack' ? b.ack(leaseIds) : b.release(leaseIds);
}

/** A completed group in the wire's snake_case (results as `GET /v1/rollouts/:id` gives them). */
export function groupBody(g: BufferedGroup): Record<string, unknown> {
  return {
    group_id: g.groupId,
    instance_id: g.instanceId,
    seq: g.seq,
    rewards: g.rewards,
    min_weight_version: g.minWeightVersion,
    staleness: g.staleness,
    complete: g.complete,
    stopped: g.stopped,
    cancelled: g.cancelled,
    deliveries: g.deliveries,
    results: g.results,
  };
}

/** A leased group on the wire: the group with its `lease_id`. */
function leasedBody(l: BufferLease): Record<string, unknown> {
  return { lease_id: l.leaseId, ...groupBody(l.group) };
}

/** Checks a batch of prompts the way `/v1/batches` does (data source, path roots), naming `instances.<i>`. */
function checkPrompts(service: ServiceContext, rt: ServiceRuntime, instances: readonly Record<string, unknown>[], sampling: Record<string, unknown> | undefined): void {
  instances.forEach((inst, i) => {
    if (typeof inst.data_source === 'string') checkDataSource(rt, inst.data_source, `instances.${i}.data_source`);
  });
  instances.forEach((inst, i) => confineInstancePaths(inst, service.options.pathRoots, `instances.${i}`));
  confineSamplingPaths(sampling, service.options.pathRoots, 'sampling_params');
}

/** An AbortSignal that fires after `ms` or when the client goes away, whichever is first. */
function waitSignal(r: Parameters<Route['handler']>[0], ms: number): AbortSignal {
  const gone = new AbortController();
  r.res.once('close', () => gone.abort());
  return AbortSignal.any([AbortSignal.timeout(ms), gone.signal]);
}

/**
 * The rollout buffer over `/v1/buffers` (see {@link RolloutBuffer}): a trainer creates a buffer
 * with its options and prompts, takes complete groups as they finish (`take` long-polls up to
 * `wait_ms`; `stream` writes each group as one NDJSON line the moment it is ready), stops a
 * group early, and deletes the buffer (its running rollouts are cancelled, their sandboxes
 * closed). Counters in `/metrics`: `rollout_buffer_groups_total{event}` and
 * `rollout_buffer_cancelled_members_total`.
 */
export function bufferRoutes(service: ServiceContext): Route[] {
  const track = (b: RolloutBuffer): void => {
    const m = metrics(service);
    let cancelled = 0;
    b.onEvent((e) => {
      if (e.type === 'group.dropped') m.groups.inc({ event: e.reason === 'stale' ? 'stale' : 'dropped' });
      else if (e.type === 'group.returned') m.groups.inc({ event: 'returned' });
      else if (e.type === 'group.delivered') {
        m.groups.inc({ event: 'delivered' });
        if (e.group.stopped) m.groups.inc({ event: 'stopped' });
      }
      const now = b.stats().cancelledMembers;
      if (now > cancelled) m.cancelled.inc(now - cancelled);
      cancelled = now;
    });
  };
  return [
    {
      method: 'POST',
      path: '/v1/buffers',
      handler: async (r) => {
        const body = parseOr400(BufferCreateRequestSchema, await r.body());
        const rt = running(service);
        const map = buffers(service);
        for (const [id, e] of map) if (e.rt !== rt) map.delete(id);
        if (map.size >= MAX_BUFFERS) throw new HttpError(429, 'TOO_MANY_BUFFERS', `the service holds ${MAX_BUFFERS} buffers at most; DELETE /v1/buffers/:id the ones you are done with`);
        checkPrompts(service, rt, body.instances ?? [], body.sampling_params);
        const buffer = new RolloutBuffer(
          rt,
          { groups: body.groups, n: body.n, overProvision: body.over_provision, order: body.order, dynamicSampling: body.dynamic_sampling, maxStaleness: body.max_staleness },
          { sampling: body.sampling_params ?? {}, trainerVersion: () => rt.trainerVersion ?? null },
        );
        track(buffer);
        buffer.add(body.instances ?? []);
        if (body.end) buffer.end();
        map.set(buffer.id, { buffer, rt });
        return { status: 201, body: bufferStatsBody(buffer) };
      },
    },
    {
      method: 'GET',
      path: '/v1/buffers/:id',
      handler: (r) => ({ status: 200, body: bufferStatsBody(find(service, r.params.id!)) }),
    },
    {
      method: 'POST',
      path: '/v1/buffers/:id/instances',
      handler: async (r) => {
        const body = parseOr400(BufferAddRequestSchema, await r.body());
        const b = find(service, r.params.id!);
        checkPrompts(service, running(service), body.instances, body.sampling_params);
        b.add(body.instances, body.sampling_params);
        if (body.end) b.end();
        return { status: 200, body: bufferStatsBody(b) };
      },
    },
    {
      method: 'POST',
      path: '/v1/buffers/:id/take',
      handler: async (r) => {
        const body = parseOr400(BufferTakeRequestSchema, await r.body());
        const b = find(service, r.params.id!);
        const signal = body.wait_ms > 0 ? waitSignal(r, body.wait_ms) : AbortSignal.abort();
        let groups: Record<string, unknown>[] = [];
        try {
          groups = body.lease_ms === undefined ? (await b.take(body.max, signal)).map(groupBody) : (await b.lease(body.max, { leaseMs: body.lease_ms, signal })).map(leasedBody);
        } catch (e) {
          // Nothing ready within wait_ms: an empty answer, not an error.
          if (!(e instanceof CancelledError)) throw e;
        }
        return { status: 200, body: { groups, buffer: bufferStatsBody(b) } };
      },
    },
    {
      method: 'POST',
      path: '/v1/buffers/:id/ack',
      handler: async (r) => {
        const body = parseOr400(BufferLeasesRequestSchema, await r.body());
        const b = find(service, r.params.id!);
        const out = b.ack(body.leases);
        return { status: 200, body: { acked: out.done, unknown: out.unknown, buffer: bufferStatsBody(b) } };
      },
    },
    {
      method: 'POST',
      path: '/v1/buffers/:id/release',
      handler: async (r) => {
        const body = parseOr400(BufferLeasesRequestSchema, await r.body());
        const b = find(service, r.params.id!);
        const out = b.release(body.leases);
        return { status: 200, body: { released: out.done, unknown: out.unknown, buffer: bufferStatsBody(b) } };
      },
    },
    {
      method: 'GET',
      path: '/v1/buffers/:id/stream',
      handler: async (r) => {
        const b = find(service, r.params.id!);
        const gone = new AbortController();
        r.res.once('close', () => gone.abort());
        r.res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store' });
        // One line per group as it is taken; the last line is the buffer's counters once it is done.
        try {
          for (;;) {
            const g = await b.next(gone.signal);
            if (!g) break;
            if (!r.res.write(`${JSON.stringify({ type: 'group', group: groupBody(g) })}\n`)) await new Promise((ok) => r.res.once('drain', ok));
          }
          r.res.end(`${JSON.stringify({ type: 'done', buffer: bufferStatsBody(b) })}\n`);
        } catch (e) {
          if (!r.res.destroyed) r.res.end(`${JSON.stringify({ type: 'error', error: { code: (e as { code?: string }).code ?? 'INTERNAL', message: (e as Error).message } })}\n`);
        }
        return undefined;
      },
    },
    {
      method: 'POST',
      path: '/v1/buffers/:id/groups/:group/stop',
      handler: async (r) => {
        parseOr400(EmptyBodySchema, await r.body());
        const b = find(service, r.params.id!);
        const stopped = await b.stopGroup(r.params.group!);
        if (!stopped) throw new HttpError(404, 'NOT_FOUND', `no running group ${r.params.group} in buffer ${b.id}`, { issues: [{ path: 'group', message: 'not a running group of this buffer' }] });
        return { status: 200, body: { stopped: true, buffer: bufferStatsBody(b) } };
      },
    },
    {
      method: 'DELETE',
      path: '/v1/buffers/:id',
      handler: async (r) => {
        const b = find(service, r.params.id!);
        buffers(service).delete(b.id);
        await b.close('buffer deleted');
        return { status: 200, body: bufferStatsBody(b) };
      },
    },
  ];
}
