import type { z } from 'zod';
import { AddLlmServerRequestSchema, CancelRequestSchema, ProcessRequestSchema, ProrlEmptyBodySchema } from '../protocol/http.js';
import type { RolloutHandle } from '../runtime/runtime-api.js';
import { ValidationError } from '../errors.js';
import { backendCodecKey, resolveTokenizerRef } from '../llm/codec-registry.js';
import { checkDataSource } from './data-source.js';
import { fastApiError } from './fastapi-error.js';
import { HttpError, parseOr400 } from './http-error.js';
import { JobLabels } from './job-labels.js';
import { confine, confineInstancePaths, confineSamplingPaths } from './path-roots.js';
import { toProrlResult } from './prorl-result.js';
import type { Route, RouteAnswer, RouteHandler, RouteRequest } from './router.js';
import type { ServiceContext } from './service-context.js';
import type { ServiceRuntime } from './service-runtime.js';

function running(service: ServiceContext): ServiceRuntime {
  const rt = service.runtime;
  if (!rt) throw new HttpError(503, 'STOPPED', 'the service is stopped; POST /start first');
  return rt;
}

/** The reference's answer to `/process` with no LLM server registered (its NoLLMServerError: 503). */
const NO_LLM_SERVER = 'No LLM server addresses configured. Please add at least one LLM server address.';

/** A job's `custom_tokenizer` that the local cache lacks: its jobs ran with the runtime's tokenizer. */
interface TokenizerFallback {
  custom_tokenizer: string;
  /** The tokenizer the job ran with instead (the runtime's codec). */
  used: string;
  reason: string;
}

/**
 * Null when the job's `custom_tokenizer` is unset, a path, or a hub name the local Hugging Face
 * cache has; otherwise what the runtime does instead (job-codec.ts keeps its own codec then), for
 * the result's `metadata` and `/status` (#28: a stderr warning alone left trainers unaware).
 */
function tokenizerFallback(sampling: Record<string, unknown> | undefined, runtimeCodec: string): TokenizerFallback | null {
  const ref = sampling?.['custom_tokenizer'];
  if (typeof ref !== 'string' || ref === '') return null;
  try {
    resolveTokenizerRef(ref);
    return null;
  } catch (e) {
    if (!(e instanceof ValidationError)) throw e;
    return { custom_tokenizer: ref, used: runtimeCodec, reason: `${ref} is not in the local Hugging Face cache (nothing is downloaded); the job ran with this runtime's tokenizer and chat template (${runtimeCodec})` };
  }
}

/**
 * The ProRL Agent Server routes, with its field names and conventions (REFERENCE.md §1, §5), so
 * its trainers run unchanged:
 * - unknown top-level keys are ignored (each name logged once), a malformed body is 422 with
 *   FastAPI's `detail`, and every error answer carries `detail` (our `error` object beside it);
 * - a bodiless POST is accepted with any content type (old aiohttp sends octet-stream);
 * - `job_id` is a label, any text: two live `/process` calls with one label both run, each as its
 *   own rollout (its id in `rollout_id`), and `/cancel` of the label reaches all of them;
 *   `/cancel` of an unknown or finished job answers 200;
 * - `/start` on a running service answers 200 `{status: 'already running'}` (the reference's 400
 *   breaks trainers that call it unconditionally);
 * - `/status` answers `status`, `pending_jobs`, `jobs` (live job labels) and int `init` / `run` /
 *   `eval` (jobs holding each stage), our detail beside them;
 * - a client that disconnects from `/process` cancels its rollout;
 * - as the reference: `/process` with no LLM server registered and `/cancel` while stopped answer
 *   503, `/cancel` wants a string `job_id` (a number is 422), `/process` takes `job_id: null`;
 * - a `custom_tokenizer` missing from the local cache is said in the result's `metadata` and in
 *   `/status` (`custom_tokenizer_fallbacks`), not only on stderr.
 */
export function prorlRoutes(service: ServiceContext): Route[] {
  const labels = new JobLabels();
  const noted = new Set<string>();
  // custom_tokenizer names the cache lacked, with their jobs so far (bounded: names are client text).
  const fallbacks = new Map<string, TokenizerFallback & { jobs: number }>();
  /** Parses a ProRL body; unknown top-level keys are dropped by the schema and logged once per name. */
  const parse = <S extends z.ZodType>(schema: S, raw: unknown, known: readonly string[]): z.infer<S> => {
    const body = parseOr400(schema, raw);
    if (raw !== null && typeof raw === 'object' && !Array.isArray(raw)) {
      for (const k of Object.keys(raw)) {
        if (known.includes(k) || noted.has(k) || noted.size >= 100) continue;
        noted.add(k);
        service.warn(`ProRL request key '${k.slice(0, 100)}' is not used here and was ignored (logged once)`);
      }
    }
    return body;
  };
  const prorl = (method: Route['method'], path: string, handler: RouteHandler): Route => ({
    method,
    path,
    handler: async (r: RouteRequest): Promise<RouteAnswer | undefined> => {
      try {
        return await handler(r);
      } catch (err) {
        return fastApiError(err);
      }
    },
  });

  return [
    prorl('POST', '/start', async (r) => {
      parse(ProrlEmptyBodySchema, await r.body(), []);
      const started = await service.start();
      return { status: 200, body: { status: started ? 'started' : 'already running' } };
    }),
    prorl('POST', '/stop', async (r) => {
      parse(ProrlEmptyBodySchema, await r.body(), []);
      const stopped = await service.stop();
      return { status: 200, body: { status: stopped ? 'stopped' : 'already stopped' } };
    }),
    prorl('GET', '/status', () => {
      const rt = service.runtime;
      if (!rt) return { status: 503, body: { status: 'stopped', detail: 'the service is stopped; POST /start first' } };
      const s = rt.status();
      const jobs: string[] = [];
      for (const x of rt.list()) if (!x.result) jobs.push(labels.labelOf(x.id) ?? x.id);
      return {
        status: 200,
        body: {
          status: s.state,
          pending_jobs: s.live,
          jobs,
          init: s.stages.init.active,
          run: s.stages.run.active,
          eval: s.stages.eval.active,
          queued: s.queued,
          stages: s.stages,
          completed: s.completed,
          outcomes: s.outcomes,
          llm_servers: rt.listBackends?.().length ?? null,
          // Ours, beyond the reference: which backends fail their probes (state `degraded`).
          llm_servers_down: (rt.listBackends?.() ?? []).filter((b) => b.state === 'degraded').map((b) => b.url),
          epoch: service.epoch,
          // Ours: custom_tokenizer names the local cache lacks, whose jobs ran with the runtime's tokenizer.
          custom_tokenizer_fallbacks: [...fallbacks.values()],
        },
      };
    }),
    prorl('POST', '/process', async (r) => {
      const raw = await r.body();
      const body = parse(ProcessRequestSchema, raw, ['instance', 'sampling_params', 'job_id']);
      const rt = running(service);
      checkDataSource(rt, body.instance.data_source, 'instance.data_source');
      confineInstancePaths(body.instance, service.options.pathRoots, 'instance');
      confineSamplingPaths(body.sampling_params, service.options.pathRoots, 'sampling_params');
      // The reference refuses a job it has no LLM server for (NoLLMServerError → 503) instead of
      // answering a failed rollout: a trainer retries the 503 once a server is registered. Only
      // where this process serves the calls itself (`codec` set: `rollout serve`): a cluster
      // gateway's workers may bring backends of their own that its registry does not list.
      if (rt.codec && rt.listBackends && rt.listBackends().every((b) => b.state === 'removed')) throw new HttpError(503, 'NO_LLM_SERVER', NO_LLM_SERVER);
      const fallback = tokenizerFallback(body.sampling_params, rt.codec?.name ?? 'the runtime default');
      if (fallback) {
        const seen = fallbacks.get(fallback.custom_tokenizer);
        if (seen) seen.jobs++;
        else if (fallbacks.size < 100) fallbacks.set(fallback.custom_tokenizer, { ...fallback, jobs: 1 });
      }
      const handle: RolloutHandle = rt.submit(body.instance, body.sampling_params ?? {});
      const label = body.job_id ?? handle.id;
      labels.add(label, handle);
      // A trainer that gives up on a request must not leave its rollout holding slots and a
      // sandbox: the connection closing before we answered cancels the rollout.
      const onClose = (): void => {
        if (!r.res.writableFinished) void handle.cancel('client disconnected').catch(() => undefined);
      };
      r.res.once('close', onClose);
      try {
        const result = await handle.result;
        const rawInstance = (raw as { instance?: { trajectory_id?: unknown } }).instance;
        const answer = toProrlResult(result, { jobId: label, trajectoryId: rawInstance?.trajectory_id });
        if (fallback) answer.metadata = { ...answer.metadata, custom_tokenizer_fallback: fallback };
        return { status: 200, body: answer };
      } finally {
        labels.remove(label, handle);
      }
    }),
    prorl('POST', '/cancel', async (r) => {
      const body = parse(CancelRequestSchema, await r.body(), ['job_id']);
      // The reference answers 503 while stopped (its ServerNotRunningError), after validating the body.
      running(service);
      const handles = labels.handles(body.job_id);
      let n = handles.length;
      await Promise.all(handles.map((h) => h.cancel('cancelled by /cancel').catch(() => undefined)));
      // A /v1 rollout may be cancelled by its id too, as before labels existed.
      if (n === 0 && service.runtime && (await service.runtime.cancel(body.job_id, 'cancelled by /cancel'))) n = 1;
      // Unknown or finished: nothing to do, and not an error (the reference answers 200).
      return { status: 200, body: { status: n > 0 ? 'cancelled' : 'not running', job_id: body.job_id, cancelled: n } };
    }),
    prorl('POST', '/add_llm_server', async (r) => {
      const body = parse(AddLlmServerRequestSchema, await r.body(), ['address', 'tokenizer', 'tool_parser']);
      // A model directory named by an API client must lie inside the configured path roots (#9.12).
      const tokenizer = body.tokenizer === undefined ? undefined : confine(body.tokenizer, service.options.pathRoots, 'tokenizer');
      const codecKey = await backendCodecKey(body.address, { tokenizer, toolParser: body.tool_parser }, service.runtime?.codec);
      const info = service.addBackend({ address: body.address, codecKey });
      return { status: 200, body: info ? { status: 'added', id: info.id } : { status: 'buffered' } };
    }),
    prorl('POST', '/clear_llm_server', async (r) => {
      parse(ProrlEmptyBodySchema, await r.body(), []);
      const n = service.clearBackends();
      return { status: 200, body: { status: 'cleared', removed: n } };
    }),
  ];
}
