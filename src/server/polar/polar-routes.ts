import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { hostname } from 'node:os';
import { sleep, type Clock } from '../../clock.js';
import { isAuthorized } from '../auth.js';
import { fastApiError } from '../fastapi-error.js';
import { HttpError, parseOr400 } from '../http-error.js';
import type { Route, RouteAnswer, RouteHandler, RouteRequest } from '../router.js';
import type { ServiceContext } from '../service-context.js';
import type { ServiceRuntime } from '../service-runtime.js';
import { TaskRequestSchema } from './polar-models.js';
import { nodeCounts, polarNodes } from './polar-nodes.js';
import { PolarTasks } from './polar-tasks.js';

/** What the Polar routes need besides the service. */
export interface PolarRouteOptions {
  clock: Clock;
  /** Where task records persist (`rollout serve --state-dir`); none: memory only. */
  stateDir?: string | undefined;
  /** The callbacks' HTTP client (tests). Default global fetch. */
  fetch?: typeof fetch | undefined;
  /** This node's id. Default the host name. */
  nodeId?: string | undefined;
}

/** The Polar routes and the task manager behind them; `close` cancels running tasks. */
export interface PolarApi {
  routes: Route[];
  tasks: PolarTasks;
  close(): Promise<void>;
}

/** Polar's own control-plane header (`slime_bridge` sends it when `POLAR_CONTROL_PLANE_TOKEN` is set). */
const POLAR_TOKEN_HEADER = 'x-polar-control-token';
const PAUSE_POLL_MS = 20;

/**
 * Polar's trainer API (docs/polar.md) over the service's runtime: `/rollout/task/*`,
 * `/rollout/status`, `/health`, `/nodes`, `/tasks`, `/tasks/{id}/sessions`, `/events` and
 * `/admin/inference/{pause,resume,status}` (also under `/rollout/admin/…`). Errors answer in
 * FastAPI's shape (`detail`; 422 naming the field for a malformed body or query). With
 * `--token`, every route but `/health` wants it, as `Authorization: Bearer` (ours) or
 * `X-Polar-Control-Token` (Polar's).
 */
export function polarRoutes(service: ServiceContext, opts: PolarRouteOptions): PolarApi {
  const nodeId = opts.nodeId ?? hostname();
  const tasks = new PolarTasks({ service, stateDir: opts.stateDir, clock: opts.clock, fetch: opts.fetch, nodeId });
  const route = (method: Route['method'], path: string, handler: RouteHandler, open = false): Route => ({
    method,
    path,
    // Open to the router: the token check is here, so Polar's header is accepted as well.
    open: true,
    handler: async (r: RouteRequest): Promise<RouteAnswer | undefined> => {
      try {
        if (!open && !authorized(r.req, r.url, service.options.token)) {
          r.req.resume();
          throw new HttpError(401, 'UNAUTHORIZED', 'missing or wrong control-plane token', { headers: { 'www-authenticate': 'Bearer' } });
        }
        return await handler(r);
      } catch (err) {
        return queryLocs(fastApiError(err));
      }
    },
  });

  const pause: RouteHandler = async (r) => {
    const timeoutS = queryNumber(r.url, 'timeout_seconds', 300, (x) => x > 0);
    const rt = weights(service);
    rt.pauseGeneration();
    const deadline = opts.clock.now() + timeoutS * 1000;
    // New calls wait from now on; the answer comes once the ones in flight have ended.
    while (!drained(rt)) {
      if (opts.clock.now() >= deadline) throw new HttpError(504, 'PAUSE_TIMEOUT', `Timed out waiting for inference requests to drain after ${timeoutS}s`);
      await sleep(opts.clock, PAUSE_POLL_MS);
    }
    return { status: 200, body: generation(rt) };
  };
  const resume: RouteHandler = () => {
    const rt = weights(service);
    rt.resumeGeneration();
    return { status: 200, body: generation(rt) };
  };
  const genStatus: RouteHandler = () => ({ status: 200, body: generation(weights(service)) });

  const routes: Route[] = [
    route('GET', '/health', () => ({ status: 200, body: { status: 'ok', nodes: polarNodes(service.runtime, nodeId, null, opts.clock).length } }), true),
    route('POST', '/rollout/task/submit', async (r) => {
      const req = parseOr400(TaskRequestSchema, await r.body(), 'TaskRequest');
      await tasks.submit(req);
      return { status: 200, body: { task_id: req.task_id, status: 'running' } };
    }),
    route('GET', '/rollout/task/:id', async (r) => {
      const st = await tasks.get(r.params.id!);
      if (!st) throw new HttpError(404, 'NOT_FOUND', 'Task not found');
      return { status: 200, body: st };
    }),
    route('DELETE', '/rollout/task/:id', async (r) => {
      const st = await tasks.cancel(r.params.id!, queryBool(r.url, 'register_if_missing'));
      if (!st) throw new HttpError(404, 'NOT_FOUND', 'Task not found');
      return { status: 200, body: st };
    }),
    route('GET', '/rollout/status', () => ({ status: 200, body: { ...tasks.status(), nodes: nodeCounts(polarNodes(service.runtime, nodeId, null, opts.clock)) } })),
    route('GET', '/nodes', (r) => ({ status: 200, body: polarNodes(service.runtime, nodeId, r.req, opts.clock) })),
    route('GET', '/tasks', (r) => {
      const since = r.url.searchParams.get('since');
      const q = {
        status: r.url.searchParams.get('status') ?? undefined,
        harness: r.url.searchParams.get('harness') ?? undefined,
        since: since === null ? undefined : queryNumber(r.url, 'since', 0, () => true),
        limit: queryNumber(r.url, 'limit', 200, (x) => Number.isInteger(x) && x >= 1 && x <= 1000, 'must be an integer in [1, 1000]'),
      };
      return { status: 200, body: { tasks: tasks.list(q) } };
    }),
    route('GET', '/tasks/:id/sessions', (r) => {
      const sessions = tasks.sessions(r.params.id!);
      if (!sessions) throw new HttpError(404, 'NOT_FOUND', 'Task not found');
      return { status: 200, body: { task_id: r.params.id, sessions } };
    }),
    route('GET', '/events', (r) => {
      tasks.bus.subscribe(r.res);
      return undefined;
    }),
  ];
  for (const prefix of ['', '/rollout']) {
    routes.push(route('POST', `${prefix}/admin/inference/pause`, pause), route('POST', `${prefix}/admin/inference/resume`, resume), route('GET', `${prefix}/admin/inference/status`, genStatus));
  }
  return { routes, tasks, close: () => tasks.close() };
}

function authorized(req: IncomingMessage, url: URL, token: string | undefined): boolean {
  if (isAuthorized(req, token, url)) return true;
  const given = req.headers[POLAR_TOKEN_HEADER];
  if (typeof given !== 'string' || !token) return false;
  const d = (s: string): Buffer => createHash('sha256').update(s).digest();
  return timingSafeEqual(d(given), d(token));
}

type WeightRuntime = ServiceRuntime & Required<Pick<ServiceRuntime, 'pauseGeneration' | 'resumeGeneration'>>;

function weights(service: ServiceContext): WeightRuntime {
  const rt = service.runtime;
  if (!rt) throw new HttpError(503, 'STOPPED', 'the service is stopped; POST /start first');
  if (!rt.pauseGeneration || !rt.resumeGeneration) throw new HttpError(501, 'NOT_IMPLEMENTED', 'this runtime cannot pause generation');
  return rt as WeightRuntime;
}

/** LLM calls at the engines now: the backend pool's in-flight count; a cluster's, from its workers' heartbeats. */
function inflight(rt: ServiceRuntime): number {
  if (rt.generationDrain) return rt.generationDrain().inflight;
  return (rt.listBackends?.() ?? []).reduce((n, b) => n + b.inFlight, 0);
}

/** No LLM call in flight, and on a cluster every worker has applied the last pause/resume. */
function drained(rt: ServiceRuntime): boolean {
  if (rt.generationDrain) {
    const d = rt.generationDrain();
    return d.acked && d.inflight === 0;
  }
  return inflight(rt) === 0;
}

function generation(rt: WeightRuntime): Record<string, unknown> {
  const n = inflight(rt);
  return { paused: rt.generationPaused ?? false, drained: drained(rt), inflight: n };
}

/** A number from the query (`dflt` when absent); 422 naming `query.<name>` when it is not one `ok` accepts. */
function queryNumber(url: URL, name: string, dflt: number, ok: (x: number) => boolean, message = 'must be a valid number'): number {
  const raw = url.searchParams.get(name);
  if (raw === null) return dflt;
  const x = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(x) || !ok(x)) throw queryError(name, message);
  return x;
}

/** FastAPI's bool query values. */
function queryBool(url: URL, name: string): boolean {
  const raw = url.searchParams.get(name);
  if (raw === null) return false;
  const v = raw.toLowerCase();
  if (['1', 'true', 'yes', 'on', 't', 'y'].includes(v)) return true;
  if (['0', 'false', 'no', 'off', 'f', 'n'].includes(v)) return false;
  throw queryError(name, 'Input should be a valid boolean');
}

/** FastAPI names a query field `["query", name]`; fastApiError names every field under `body`. */
function queryLocs(a: ReturnType<typeof fastApiError>): ReturnType<typeof fastApiError> {
  const body = a.body as { detail?: unknown };
  if (Array.isArray(body.detail)) {
    for (const d of body.detail as { loc: (string | number)[] }[]) if (d.loc[0] === 'body' && d.loc[1] === '(query)') d.loc = ['query', ...d.loc.slice(2)];
  }
  return a;
}

function queryError(name: string, message: string): HttpError {
  // fastApiError prefixes `body`; a query field is named as FastAPI names it, `query.<name>`.
  return new HttpError(400, 'VALIDATION', `invalid query parameter ${name}`, { issues: [{ path: `(query).${name}`, message }] });
}
