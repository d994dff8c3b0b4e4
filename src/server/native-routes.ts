import { randomUUID } from 'node:crypto';
import { violationCounts } from '../protocol/integrity.js';
import { AddBackendRequestSchema, EmptyBodySchema, BatchRequestSchema, ListQuerySchema, SubmitRequestSchema } from '../protocol/http.js';
import { backendCodecKey } from '../llm/codec-registry.js';
import type { RolloutSummary } from '../runtime/runtime-api.js';
import type { GroupHandle } from '../runtime/runtime-api.js';
import { checkCapacity } from './capacity.js';
import { parseTreeOptions } from '../runtime/rollout-tree.js';
import { redactHostPaths } from './redact.js';
import type { SerializedError } from '../errors.js';
import { checkDataSource } from './data-source.js';
import { confine, confineInstancePaths, confineSamplingPaths } from './path-roots.js';
import { HttpError, parseOr400 } from './http-error.js';
import type { Route } from './router.js';
import type { ServiceContext } from './service-context.js';
import type { AcceptedHandle, BackendControl, ServiceRuntime } from './service-runtime.js';

function running(service: ServiceContext): ServiceRuntime {
  const rt = service.runtime;
  if (!rt) throw new HttpError(503, 'STOPPED', 'the service is stopped; POST /start first');
  return rt;
}

function backends(service: ServiceContext): ServiceRuntime & BackendControl {
  const rt = running(service);
  if (!rt.addBackend || !rt.listBackends || !rt.drainBackend || !rt.removeBackend) {
    throw new HttpError(501, 'NOT_IMPLEMENTED', 'this runtime has no backend pool');
  }
  return rt as ServiceRuntime & BackendControl;
}

/** A summary in the wire's snake_case, with the outcome but without the trajectory. */
export function summaryBody(s: RolloutSummary): Record<string, unknown> {
  return {
    id: s.id,
    instance_id: s.instanceId,
    group_id: s.groupId,
    trajectory_id: s.trajectoryId,
    data_source: s.dataSource,
    state: s.state,
    turn: s.turn,
    tokens: s.tokens,
    attempt: s.attempt,
    submitted_at: s.submittedAt,
    outcome: s.result?.outcome ?? null,
    reward: s.result?.reward ?? null,
    resolved: s.result ? s.result.resolved : null,
    response_tokens: s.result ? sampledTokens(s.result.trajectory.turns) : null,
    weight_version: s.result ? (s.result.trajectory.minWeightVersion ?? s.result.trajectory.turns[0]?.weightVersion ?? null) : null,
    // For the visualizer's rows seeded from the listing: the elapsed time and the integrity flag (#27, #30).
    wall_ms: s.result?.timing.wallMs ?? null,
    violations: s.result?.integrity?.violations.length ? violationCounts(s.result.integrity.violations) : null,
    ...(s.parentId !== undefined ? { parent_id: s.parentId, branch_turn: s.branchTurn } : {}),
  };
}

/** The sampled tokens of a trajectory, counted per turn (a listing of thousands must not walk every token). */
function sampledTokens(turns: readonly { outputIds: readonly number[] }[]): number {
  let n = 0;
  for (const t of turns) n += t.outputIds.length;
  return n;
}

/**
 * The native API under `/v1`, plus `/healthz` and `/metrics`. Submissions answer at once (202)
 * with ids; results are fetched or watched over WebSocket. A batch is validated whole before any
 * rollout is admitted, and a batch the queue cannot take whole is cancelled whole (429).
 */
export function nativeRoutes(service: ServiceContext): Route[] {
  return [
    {
      method: 'GET',
      path: '/healthz',
      // Open without the token: load balancers and supervisors probe it, and it tells nothing
      // beyond "the process answers" and whether a runtime is running.
      open: true,
      handler: () => ({ status: 200, body: { status: 'ok', runtime: service.runtime ? 'running' : 'stopped', epoch: service.epoch } }),
    },
    {
      method: 'GET',
      path: '/metrics',
      handler: async (r) => {
        const { contentType, body } = await service.metrics.text();
        r.res.writeHead(200, { 'content-type': contentType, 'content-length': Buffer.byteLength(body) });
        r.res.end(body);
        return undefined;
      },
    },
    {
      method: 'POST',
      path: '/v1/rollouts',
      handler: async (r) => {
        const body = parseOr400(SubmitRequestSchema, await r.body());
        const rt = running(service);
        checkDataSource(rt, body.instance.data_source, 'instance.data_source');
        confineInstancePaths(body.instance, service.options.pathRoots, 'instance');
        confineSamplingPaths(body.sampling_params, service.options.pathRoots, 'sampling_params');
        const handle = rt.submit(body.instance, body.sampling_params ?? {}, { id: body.id, groupId: body.group_id });
        // /v1 submit answers with the id; the result is read later (its failure is a result field).
        handle.result.catch(() => undefined);
        await (handle as AcceptedHandle).accepted;
        return { status: 202, body: { id: handle.id, group_id: body.group_id ?? null, state: rt.get(handle.id)?.state ?? 'queued' } };
      },
    },
    {
      method: 'POST',
      path: '/v1/batches',
      handler: async (r) => {
        const body = parseOr400(BatchRequestSchema, await r.body());
        const tree = body.tree ? parseTreeOptions({ branchTurns: body.tree.branch_turns, width: body.tree.width }, body.n) : null;
        // A tree group is admitted whole: every node it will grow counts.
        const total = (tree?.nodes ?? body.n) * body.instances.length;
        if (total > service.options.maxBatchRollouts) {
          throw new HttpError(413, 'BATCH_TOO_LARGE', `the batch asks for ${total} rollouts (n × instances); one request may ask for ${service.options.maxBatchRollouts} at most`, { issues: [{ path: 'n', message: `n × instances must be at most ${service.options.maxBatchRollouts}` }] });
        }
        const rt = running(service);
        body.instances.forEach((inst, i) => checkDataSource(rt, inst.data_source, `instances.${i}.data_source`));
        body.instances.forEach((inst, i) => confineInstancePaths(inst, service.options.pathRoots, `instances.${i}`));
        // Capacity first (#9.10): a batch the queue cannot hold whole is refused before a single
        // rollout is admitted — no work, no events, no phantom cancelled outcomes.
        checkCapacity(rt, total);
        confineSamplingPaths(body.sampling_params, service.options.pathRoots, 'sampling_params');
        const groups: GroupHandle[] = [];
        try {
          for (const inst of body.instances) {
            const g = rt.submitGroup(inst, body.sampling_params ?? {}, body.n, { groupId: `g-${randomUUID()}`, ...(tree ? { tree: tree.tree } : {}) });
            // Observed, not dropped: results are read through the results endpoint and events.
            g.results.catch(() => undefined);
            groups.push(g);
          }
          await Promise.all(groups.flatMap((g) => (g as AcceptedHandle).accepted ?? []));
        } catch (err) {
          // All or nothing: what was admitted before the refusal is withdrawn.
          await Promise.all(groups.map((g) => g.cancel('batch refused').catch(() => undefined)));
          throw err;
        }
        return {
          status: 202,
          body: {
            groups: groups.map((g, i) => ({
              group_id: g.groupId,
              instance_id: body.instances[i]!.instance_id ?? null,
              rollout_ids: g.rollouts.map((h) => h.id),
            })),
            rollout_ids: groups.flatMap((g) => g.rollouts.map((h) => h.id)),
          },
        };
      },
    },
    {
      method: 'GET',
      path: '/v1/rollouts',
      handler: (r) => {
        const raw: Record<string, string> = Object.fromEntries(r.url.searchParams);
        delete raw['token'];
        const q = parseOr400(ListQuerySchema, raw, 'query');
        const rt = running(service);
        const all = rt.list({
          ...(q.state ? { state: q.state } : {}),
          ...(q.outcome ? { outcome: q.outcome } : {}),
          ...(q.group ? { groupId: q.group } : {}),
        });
        const limit = Math.min(q.limit, service.options.listLimit);
        return { status: 200, body: { rollouts: all.slice(0, limit).map(summaryBody), total: all.length } };
      },
    },
    {
      method: 'GET',
      path: '/v1/rollouts/:id',
      handler: async (r) => {
        const rt = running(service);
        const s = rt.get(r.params.id!) ?? (await rt.lookup?.(r.params.id!));
        if (!s) throw new HttpError(404, 'NOT_FOUND', `no rollout ${r.params.id!.slice(0, 200)}`);
        return { status: 200, body: { ...summaryBody(s), result: s.result?.error ? { ...s.result, error: redactError(s.result.error) } : s.result } };
      },
    },
    {
      method: 'POST',
      path: '/v1/rollouts/:id/cancel',
      handler: async (r) => {
        parseOr400(EmptyBodySchema, await r.body());
        const ok = await running(service).cancel(r.params.id!, 'cancelled by API');
        if (!ok) throw new HttpError(404, 'NOT_FOUND', `no live rollout ${r.params.id!.slice(0, 200)}`);
        return { status: 200, body: { id: r.params.id, cancelled: true } };
      },
    },
    {
      method: 'GET',
      path: '/v1/backends',
      handler: () => ({ status: 200, body: { backends: backends(service).listBackends() } }),
    },
    {
      method: 'POST',
      path: '/v1/backends',
      handler: async (r) => {
        const body = parseOr400(AddBackendRequestSchema, await r.body());
        backends(service);
        // A model directory named by an API client must lie inside the configured path roots (#9.12).
        const tokenizer = body.tokenizer === undefined ? undefined : confine(body.tokenizer, service.options.pathRoots, 'tokenizer');
        const codecKey = await backendCodecKey(body.address, { tokenizer, toolParser: body.tool_parser, model: body.model }, service.runtime?.codec);
        const info = service.addBackend({ address: body.address, id: body.id, model: body.model, weightVersion: body.weight_version, codecKey });
        return { status: 201, body: info };
      },
    },
    {
      method: 'POST',
      path: '/v1/backends/:id/drain',
      handler: async (r) => {
        parseOr400(EmptyBodySchema, await r.body());
        if (!backends(service).drainBackend(r.params.id!)) throw new HttpError(404, 'NOT_FOUND', `no backend ${r.params.id!.slice(0, 200)}`);
        return { status: 200, body: { id: r.params.id, state: 'draining' } };
      },
    },
    {
      method: 'DELETE',
      path: '/v1/backends/:id',
      handler: (r) => {
        if (!backends(service).removeBackend(r.params.id!)) throw new HttpError(404, 'NOT_FOUND', `no backend ${r.params.id!.slice(0, 200)}`);
        service.forgetBackend(r.params.id!);
        return { status: 200, body: { id: r.params.id, removed: true } };
      },
    },
  ];
}

/** An error as a client may see it: host paths in its messages (and its causes') replaced. */
function redactError(e: SerializedError): SerializedError {
  return { ...e, message: redactHostPaths(e.message), ...(e.cause ? { cause: redactError(e.cause) } : {}) };
}
