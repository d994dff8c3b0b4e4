import { z } from 'zod';
import { TaskRequestSchema } from './polar-models.js';

/**
 * Polar's routes in `/v1/openapi.json` (src/server/openapi.ts): summaries, the `TaskRequest`
 * body, the `TaskStatus` answer, the query parameters, and which routes are open (`/health`;
 * the rest want the control-plane token as `Authorization: Bearer` or `X-Polar-Control-Token`).
 * The answer schemas describe polar-models.ts's interfaces for the document only.
 */
export interface PolarOp {
  summary: string;
  request?: z.ZodType;
  response?: z.ZodType;
  query?: { name: string; schema: Record<string, unknown> }[];
  /** Open without the token. */
  open?: boolean;
}

const ints = z.array(z.number().int());
const dict = z.record(z.string(), z.unknown());

const TraceSchema = z.object({
  prompt_ids: ints,
  response_ids: ints,
  loss_mask: z.array(z.union([z.literal(0), z.literal(1)])),
  prompt_messages: z.array(dict),
  response_messages: z.array(dict),
  tools: z.array(dict).nullable(),
  finish_reason: z.string().nullable(),
  response_logprobs: z.array(z.number()).nullable(),
  reward: z.number().nullable(),
  reward_components: z.record(z.string(), z.number()),
  metadata: dict,
});

const TIMING = ['register_to_init_queue_ms', 'init_ms', 'ready_queue_ms', 'run_ms', 'postrun_ms', 'container_start_ms', 'agent_exec_ms', 'build_ms', 'eval_ms', 'e2e_ms'] as const;

const SessionResultSchema = z.object({
  session_id: z.string().describe('sk-polar-<uuid>: also the session\'s proxy API key'),
  task_id: z.string(),
  status: z.enum(['REGISTERED', 'INITIALIZING', 'READY', 'RUNNING', 'POST_RUN', 'BUILDING', 'EVALUATING', 'COMPLETED', 'ERROR', 'TIMEOUT']),
  trajectory: z.object({ status: z.enum(['COMPLETED', 'TIMEOUT', 'ERROR']), metadata: dict, traces: z.array(TraceSchema), error: z.string().nullable() }),
  timing: z.object(Object.fromEntries(TIMING.map((k) => [k, z.number()])) as Record<(typeof TIMING)[number], z.ZodNumber>),
  node_id: z.string().nullable(),
  error: z.string().nullable(),
  metadata: dict,
});

/** `TaskStatus` (and, terminal, the callback's `TaskResult`). */
export const TaskStatusSchema = z.object({
  task_id: z.string(),
  status: z.enum(['running', 'cancelling', 'cancelled', 'completed', 'failed']),
  total_sessions: z.number().int(),
  completed_sessions: z.number().int(),
  results: z.array(SessionResultSchema),
  result_paths: z.array(z.string()),
});

const Generation = z.object({ paused: z.boolean(), drained: z.boolean(), inflight: z.number().int() });
const timeoutQuery = [{ name: 'timeout_seconds', schema: { type: 'number', default: 300 } }];

/** `METHOD path` → what the document says of it. */
export const POLAR_OPS: Record<string, PolarOp> = {
  'GET /health': { summary: 'Polar: liveness and the node count', response: z.object({ status: z.literal('ok'), nodes: z.number().int() }), open: true },
  'POST /rollout/task/submit': {
    summary: 'Polar: submit a task (num_samples sessions of one instruction); 409 when the id is running or was cancelled in the last 300 s, 422 naming the field (a runtime.image this server\'s image store lacks too), 429 past capacity (nothing started)',
    request: TaskRequestSchema,
    response: z.object({ task_id: z.string(), status: z.literal('running') }),
  },
  'GET /rollout/task/:id': { summary: 'Polar: a task\'s status and its sessions\' results (traces); 404', response: TaskStatusSchema },
  'DELETE /rollout/task/:id': {
    summary: 'Polar: cancel a task; with register_if_missing an unknown id gets a 300 s tombstone',
    response: TaskStatusSchema,
    query: [{ name: 'register_if_missing', schema: { type: 'boolean', default: false } }],
  },
  'GET /rollout/status': { summary: 'Polar: every task\'s status, the runtime\'s pipeline and the node counts' },
  'GET /nodes': { summary: 'Polar: the nodes (each worker of a --redis cluster, else this runtime) as GatewayNodeInfo', response: z.array(dict) },
  'GET /tasks': {
    summary: 'Polar: task summaries, newest first',
    query: [
      { name: 'status', schema: { type: 'string', enum: ['running', 'cancelling', 'cancelled', 'completed', 'failed'] } },
      { name: 'harness', schema: { type: 'string' } },
      { name: 'since', schema: { type: 'number', description: 'seconds since the epoch' } },
      { name: 'limit', schema: { type: 'integer', minimum: 1, maximum: 1000, default: 200 } },
    ],
  },
  'GET /tasks/:id/sessions': { summary: 'Polar: a task\'s sessions: status, and once done reward, timing, error' },
  'GET /events': { summary: 'Polar: server-sent events (task.created, session.state_changed, task.updated, task.completed; ping after 15 s idle)' },
};
for (const prefix of ['', '/rollout']) {
  POLAR_OPS[`POST ${prefix}/admin/inference/pause`] = { summary: 'Polar: new LLM calls wait; answers once none is in flight (504 past timeout_seconds)', response: Generation, query: timeoutQuery };
  POLAR_OPS[`POST ${prefix}/admin/inference/resume`] = { summary: 'Polar: LLM calls go on', response: Generation };
  POLAR_OPS[`GET ${prefix}/admin/inference/status`] = { summary: 'Polar: paused, drained, in-flight LLM calls', response: Generation };
}
