import { AddLlmServerRequestSchema, EmptyBodySchema, CancelRequestSchema, ProcessRequestSchema } from '../protocol/http.js';
import { backendCodecKey } from '../llm/codec-registry.js';
import { HttpError, parseOr400 } from './http-error.js';
import { toProrlResult } from './prorl-result.js';
import type { Route } from './router.js';
import type { ServiceContext } from './service-context.js';
import { checkDataSource } from './data-source.js';
import type { ServiceRuntime } from './service-runtime.js';

function running(service: ServiceContext): ServiceRuntime {
  const rt = service.runtime;
  if (!rt) throw new HttpError(503, 'STOPPED', 'the service is stopped; POST /start first');
  return rt;
}

/**
 * The ProRL Agent Server routes, with its field names (REFERENCE.md §1). Differences, all
 * additive: `/start` on a running service answers 200 `{status: 'already running'}` (the
 * reference answers 400, which breaks trainers that call it unconditionally); `/process` answers
 * also `job_id`, `outcome` and `attempts`; a client that disconnects from `/process` cancels its
 * rollout.
 */
export function prorlRoutes(service: ServiceContext): Route[] {
  return [
    {
      method: 'POST',
      path: '/start',
      handler: async (r) => {
        parseOr400(EmptyBodySchema, await r.body());
        const started = await service.start();
        return { status: 200, body: { status: started ? 'started' : 'already running' } };
      },
    },
    {
      method: 'POST',
      path: '/stop',
      handler: async (r) => {
        parseOr400(EmptyBodySchema, await r.body());
        const stopped = await service.stop();
        return { status: 200, body: { status: stopped ? 'stopped' : 'already stopped' } };
      },
    },
    {
      method: 'GET',
      path: '/status',
      handler: () => {
        const rt = service.runtime;
        if (!rt) return { status: 503, body: { status: 'stopped' } };
        const s = rt.status();
        return {
          status: 200,
          body: {
            status: s.state,
            pending_jobs: s.live,
            queued: s.queued,
            init: s.stages.init,
            run: s.stages.run,
            eval: s.stages.eval,
            completed: s.completed,
            outcomes: s.outcomes,
            llm_servers: rt.listBackends?.().length ?? null,
            epoch: service.epoch,
          },
        };
      },
    },
    {
      method: 'POST',
      path: '/process',
      handler: async (r) => {
        const body = parseOr400(ProcessRequestSchema, await r.body());
        const rt = running(service);
        checkDataSource(rt, body.instance.data_source, 'instance.data_source');
        const handle = rt.submit(body.instance, body.sampling_params ?? {}, { id: body.job_id });
        // A trainer that gives up on a request must not leave its rollout holding slots and a
        // sandbox: the connection closing before we answered cancels the rollout.
        const onClose = (): void => {
          if (!r.res.writableFinished) void handle.cancel('client disconnected').catch(() => undefined);
        };
        r.res.once('close', onClose);
        const result = await handle.result;
        return { status: 200, body: toProrlResult(result) };
      },
    },
    {
      method: 'POST',
      path: '/cancel',
      handler: async (r) => {
        const body = parseOr400(CancelRequestSchema, await r.body());
        const ok = await running(service).cancel(body.job_id, 'cancelled by /cancel');
        if (!ok) return { status: 404, body: { status: 'not found', error: { code: 'NOT_FOUND', message: `no live job ${body.job_id}`, issues: [] } } };
        return { status: 200, body: { status: 'cancelled', job_id: body.job_id } };
      },
    },
    {
      method: 'POST',
      path: '/add_llm_server',
      handler: async (r) => {
        const body = parseOr400(AddLlmServerRequestSchema, await r.body());
        const codecKey = await backendCodecKey(body.address, { tokenizer: body.tokenizer, toolParser: body.tool_parser });
        const info = service.addBackend({ address: body.address, codecKey });
        return { status: 200, body: info ? { status: 'added', id: info.id } : { status: 'buffered' } };
      },
    },
    {
      method: 'POST',
      path: '/clear_llm_server',
      handler: async (r) => {
        parseOr400(EmptyBodySchema, await r.body());
        const n = service.clearBackends();
        return { status: 200, body: { status: 'cleared', removed: n } };
      },
    },
  ];
}
