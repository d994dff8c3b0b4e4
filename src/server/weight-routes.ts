import { abortEngines } from '../llm/engine-abort.js';
import { EmptyBodySchema, WeightsRequestSchema } from '../protocol/http.js';
import { HttpError, parseOr400 } from './http-error.js';
import type { Route } from './router.js';
import type { ServiceContext } from './service-context.js';
import type { BackendControl, GenerationControl, ServiceRuntime } from './service-runtime.js';

type WeightRuntime = ServiceRuntime & GenerationControl & Required<Pick<BackendControl, 'listBackends' | 'setWeightVersion'>>;

function control(service: ServiceContext): WeightRuntime {
  const rt = service.runtime;
  if (!rt) throw new HttpError(503, 'STOPPED', 'the service is stopped; POST /start first');
  if (!rt.pauseGeneration || !rt.setTrainerVersion || !rt.setWeightVersion || !rt.listBackends) {
    throw new HttpError(501, 'NOT_IMPLEMENTED', 'this runtime has no weight control');
  }
  return rt as WeightRuntime;
}

function state(rt: WeightRuntime): Record<string, unknown> {
  return {
    paused: rt.generationPaused,
    trainer_version: rt.trainerVersion,
    backends: rt.listBackends().map((b) => ({ id: b.id, state: b.state, weight_version: b.weightVersion })),
  };
}

/**
 * Async RL under `/v1/weights`: the trainer's weight updates and pause / resume of new LLM calls
 * around an in-place sync. `POST /v1/weights` checks every named backend exists before it changes
 * any (404 naming the first unknown one), so an update is all or nothing. Each answer is the
 * state after the call: `paused`, `trainer_version`, and each backend's `weight_version`.
 */
export function weightRoutes(service: ServiceContext): Route[] {
  return [
    {
      method: 'GET',
      path: '/v1/weights',
      handler: () => ({ status: 200, body: state(control(service)) }),
    },
    {
      method: 'POST',
      path: '/v1/weights',
      handler: async (r) => {
        const body = parseOr400(WeightsRequestSchema, await r.body());
        const rt = control(service);
        if (body.backends) {
          const known = new Set(rt.listBackends().filter((b) => b.state !== 'removed').map((b) => b.id));
          const missing = body.backends.find((id) => !known.has(id));
          if (missing !== undefined) throw new HttpError(404, 'NOT_FOUND', `no backend ${missing}`, { issues: [{ path: 'backends', message: `unknown backend ${missing}` }] });
          for (const id of body.backends) rt.setWeightVersion(body.version, id);
        } else rt.setWeightVersion(body.version);
        if (body.trainer_version !== undefined) rt.setTrainerVersion(body.trainer_version);
        return { status: 200, body: state(rt) };
      },
    },
    {
      method: 'POST',
      path: '/v1/weights/pause',
      handler: async (r) => {
        parseOr400(EmptyBodySchema, await r.body());
        const rt = control(service);
        rt.pauseGeneration();
        return { status: 200, body: state(rt) };
      },
    },
    {
      method: 'POST',
      path: '/v1/weights/abort',
      handler: async (r) => {
        parseOr400(EmptyBodySchema, await r.body());
        const rt = control(service);
        // The runtime's own relay when it has one (the embedded runtime), else straight to the engines.
        const engines = await (rt.abortGeneration ? rt.abortGeneration() : abortEngines(rt.listBackends()));
        return { status: 200, body: { ...state(rt), engines } };
      },
    },
    {
      method: 'POST',
      path: '/v1/weights/resume',
      handler: async (r) => {
        parseOr400(EmptyBodySchema, await r.body());
        const rt = control(service);
        rt.resumeGeneration();
        return { status: 200, body: state(rt) };
      },
    },
  ];
}
