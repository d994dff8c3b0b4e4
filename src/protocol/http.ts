import { IntegrityReportSchema } from './integrity.js';
import { TreeBodySchema } from './fork.js';
import { z } from 'zod';
import { LeaseIdsSchema } from './buffer.js';
import { InstanceSchema, SamplingParamsSchema } from './instance.js';
import { MessageSchema, ToolSchemaSchema } from './messages.js';
import { RolloutStateSchema } from './events.js';
import { OutcomeSchema } from './trajectory.js';

/**
 * Every body the HTTP service accepts or answers, and every WebSocket message, as zod schemas.
 * `/v1` request schemas are strict (unknown top-level keys are a 400 naming the key); the ProRL
 * ones ignore unknown top-level keys, as the reference (FastAPI) does. The instance and sampling
 * params pass unknown keys through to the task handler, as ProRL does.
 */

/** A job / rollout id as a client may choose it. */
const IdSchema = z.string().min(1).max(200).regex(/^[A-Za-z0-9._:@-]+$/, 'only letters, digits and . _ : @ -');

/**
 * `sampling_params` as trainers send them: a key set to `null` means "not set" (Python clients
 * serialize unset options as `None`), so null-valued keys are dropped before validation.
 */
const SamplingParamsBodySchema = z.preprocess(
  (v) => (v !== null && typeof v === 'object' && !Array.isArray(v) ? Object.fromEntries(Object.entries(v).filter(([, x]) => x !== null)) : v),
  SamplingParamsSchema,
);

/**
 * A ProRL `job_id`: a label the client picks, any text (`owner/repo#1 x`), a number taken as its
 * decimal text. Not the rollout's id: two live jobs may share it, and `/cancel` reaches both.
 */
const JobIdSchema = z.union([z.string().min(1).max(4096), z.number()]).transform(String);

/** Instance routing fields a pandas row may carry as a missing value (`NaN`, read as null): unset. */
const ROUTING_FIELDS = ['data_source', 'instance_id', 'trajectory_id', 'oracle'];

/**
 * A ProRL instance as the reference's clients send it, normalized at the edge (#28): a routing
 * field set to null (a pandas `NaN`) is unset, and `reward_model` given as a JSON string (a
 * row serialized column by column) is the object it encodes — the reference takes either.
 */
const ProrlInstanceSchema = z.preprocess((v) => {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return v;
  const out: Record<string, unknown> = { ...(v as Record<string, unknown>) };
  for (const k of ROUTING_FIELDS) if (out[k] === null) delete out[k];
  const rm = out['reward_model'];
  if (typeof rm === 'string' && /^\s*\{/.test(rm)) {
    try {
      out['reward_model'] = JSON.parse(rm);
    } catch {
      // not JSON: left as sent, for the handler to name the field
    }
  }
  return out;
}, InstanceSchema);

/** `POST /process` (ProRL): one rollout, answered when it ends. Unknown top-level keys are ignored. */
export const ProcessRequestSchema = z.object({
  instance: ProrlInstanceSchema,
  sampling_params: SamplingParamsBodySchema.optional(),
  /** ProRL's job label, used by `/cancel`; the rollout id when absent or null (the reference's `Optional[str]`). */
  job_id: JobIdSchema.nullish().transform((v) => v ?? undefined),
});
/** A parsed `/process` body. */
export type ProcessRequest = z.infer<typeof ProcessRequestSchema>;

/** `/v1` routes without a body (`.../cancel`, `.../drain`) take none, or `{}`; anything else is a 400. */
export const EmptyBodySchema = z.object({}).strict().optional();

/** ProRL routes without a body (`/start`, `/stop`, `/clear_llm_server`): none, or any object (keys ignored). */
export const ProrlEmptyBodySchema = z.object({}).optional();

/**
 * `POST /cancel` (ProRL): every live job with this label is cancelled. The label is a string, as
 * the reference's pydantic model wants it: a number is refused (422), not read as its text.
 */
export const CancelRequestSchema = z.object({ job_id: z.string({ error: 'must be a string' }).min(1).max(4096) });

/** `POST /add_llm_server` (ProRL): a backend address (`http://h:p`, `vllm+http://h:p`, `scripted`). */
export const AddLlmServerRequestSchema = z
  .object({
    address: z.string().min(1).max(2048),
    /** The backend's model directory (tokenizer.json, …); checked against the backend's `/tokenize` where it has one (#17). */
    tokenizer: z.string().min(1).max(4096).optional(),
    /** Its tool-call format (`hermes`, `qwen3_coder`, `llama3_json`, `mistral`, `deepseek_v3`). */
    tool_parser: z.string().min(1).max(64).optional(),
  });

/** `critical_error` of the ProRL result: which stage failed for a reason other than the policy. */
export const CriticalErrorSchema = z.enum(['init', 'run', 'eval', 'timeout']).nullable();

/** Why the agent loop stopped, in the ProRL result's `finish_reason`. */
export const ProrlFinishReasonSchema = z.enum(['finish_tool', 'no_tool_call', 'max_iterations', 'context_full', 'length', 'timeout', 'cancelled', 'error']);
/** A `finish_reason`. */
export type ProrlFinishReason = z.infer<typeof ProrlFinishReasonSchema>;

/**
 * A message of the ProRL result: as {@link MessageSchema}, but tool calls are `{name, arguments}`
 * with `arguments` a JSON string (clients `json.loads` them), tool messages carry no
 * `tool_call_id` (the reference's clients pair outputs with calls by position, #28), and
 * `token_ids` is always present.
 */
export const ProrlMessageSchema = MessageSchema.omit({ tool_call_id: true }).extend({
  tool_calls: z.array(z.object({ name: z.string(), arguments: z.string() }).strict()).optional(),
  token_ids: z.array(z.number().int()),
});
/** A message of the ProRL result. */
export type ProrlMessage = z.infer<typeof ProrlMessageSchema>;

/** The `/process` answer: the ProRL result shape, plus `job_id`, `rollout_id`, `outcome` and `attempts`. */
export const ProcessResponseSchema = z.object({
  /** The client's `job_id` label (the rollout id when it gave none). */
  job_id: z.string(),
  /** This rollout's own id (`/v1/rollouts/{id}`). */
  rollout_id: z.string(),
  messages: z.array(ProrlMessageSchema),
  tools: z.array(ToolSchemaSchema),
  resolved: z.boolean(),
  reward: z.number().nullable(),
  critical_error: CriticalErrorSchema,
  /** Drop this sample from training: never true for a completed or truncated rollout. */
  filter: z.boolean(),
  /** The last action was the finish tool. */
  finish: z.boolean(),
  finish_reason: ProrlFinishReasonSchema,
  /** The agent stopped on its own (finish tool, or a turn without a tool call) and the rollout completed. */
  end_properly: z.boolean(),
  /** The rollout ran through evaluation (outcome completed or truncated). */
  success: z.boolean(),
  /** `Name: message` of the error that ended it (host paths redacted), or null. */
  error: z.string().nullable(),
  /** The agent's diff, on SWE data sources only ('' when it changed nothing). */
  git_patch: z.string().optional(),
  instance_id: z.string().nullable(),
  /** `instance.trajectory_id` with the JSON type the client sent. */
  trajectory_id: z.union([z.string(), z.number()]).nullable(),
  timing: z.object({
    init_time: z.number(),
    run_time: z.number(),
    eval_time: z.number(),
    others_time: z.number(),
    counted_elapsed: z.number(),
    timeout_triggered: z.boolean(),
  }),
  outcome: OutcomeSchema,
  attempts: z.number().int(),
  /**
   * What the client should know beside the reference's fields: `custom_tokenizer_fallback`
   * (`{custom_tokenizer, used, reason}`) when the job's `custom_tokenizer` was not in the local
   * cache and the runtime's tokenizer ran it instead (#28); `integrity`, the monitor's report
   * (#27), when the rollout had a policy.
   */
  metadata: z.object({ integrity: IntegrityReportSchema.optional() }).passthrough().optional(),
});
/** The `/process` answer. */
export type ProcessResponse = z.infer<typeof ProcessResponseSchema>;

/** `{status}` answers of the ProRL control routes. */
export const StatusResponseSchema = z.object({ status: z.string() }).passthrough();

/** `POST /v1/rollouts`: submit one rollout; answered at once with its id. */
export const SubmitRequestSchema = z
  .object({
    instance: InstanceSchema,
    sampling_params: SamplingParamsBodySchema.optional(),
    id: IdSchema.optional(),
    group_id: IdSchema.optional(),
  })
  .strict();
/** A parsed `POST /v1/rollouts` body. */
export type SubmitRequest = z.infer<typeof SubmitRequestSchema>;

/** `POST /v1/rollouts` answer (202): the id at once. */
export const SubmitResponseSchema = z.object({ id: z.string(), group_id: z.string().nullable(), state: RolloutStateSchema });

/** `POST /v1/batches`: every instance submitted as a GRPO group of `n` rollouts. */
export const BatchRequestSchema = z
  .object({
    instances: z.array(InstanceSchema).min(1).max(10_000),
    sampling_params: SamplingParamsBodySchema.optional(),
    n: z.number().int().min(1).max(1024).default(1),
    /** Tree rollouts (#26): the n rollouts of each instance grow branches at these turns. */
    tree: TreeBodySchema.optional(),
  })
  .strict();
/** A parsed `POST /v1/batches` body. */
export type BatchRequest = z.infer<typeof BatchRequestSchema>;

/** `POST /v1/batches` answer (202): group and rollout ids, in instance order. */
export const BatchResponseSchema = z.object({
  groups: z.array(z.object({ group_id: z.string(), instance_id: z.string().nullable(), rollout_ids: z.array(z.string()) })),
  rollout_ids: z.array(z.string()),
});

/** Query of `GET /v1/rollouts`. */
export const ListQuerySchema = z
  .object({
    state: RolloutStateSchema.optional(),
    outcome: OutcomeSchema.optional(),
    group: IdSchema.optional(),
    limit: z.coerce.number().int().min(1).max(100_000).default(1000),
  })
  .strict();

/** A rollout as listed: its summary and, once it ended, the outcome (without the trajectory). */
export const RolloutSummaryResponseSchema = z.object({
  id: z.string(),
  instance_id: z.string().nullable(),
  group_id: z.string().nullable(),
  trajectory_id: z.string().nullable(),
  data_source: z.string(),
  state: RolloutStateSchema,
  turn: z.number().int(),
  tokens: z.number().int(),
  attempt: z.number().int(),
  submitted_at: z.number(),
  outcome: OutcomeSchema.nullable(),
  reward: z.number().nullable(),
  resolved: z.boolean().nullable(),
  /** Tokens the policy sampled (loss mask 1), once ended; the visualizer's response-length chart. */
  response_tokens: z.number().int().nullable().optional(),
  /** The oldest weight version that sampled a token of it (the trajectory's minWeightVersion), once ended. */
  weight_version: z.union([z.string(), z.number()]).nullable().optional(),
  /** The result's wall time in ms, once it ended (the visualizer's elapsed column). */
  wall_ms: z.number().nullable(),
  /** Integrity violations by kind (#27), or null when the result has none. */
  violations: z.record(z.string(), z.number().int()).nullable(),
  /** A branch of a fork (#26): its parent and the turn boundary it was forked at. */
  parent_id: z.string().optional(),
  branch_turn: z.number().int().optional(),
});

/** `POST /v1/backends`. */
export const AddBackendRequestSchema = z
  .object({
    address: z.string().min(1).max(2048),
    id: IdSchema.optional(),
    model: z.string().min(1).max(500).optional(),
    weight_version: z.union([z.string().max(200), z.number()]).nullable().optional(),
    /** The backend's model directory; rollouts tokenized for another model never go to it (#17). */
    tokenizer: z.string().min(1).max(4096).optional(),
    tool_parser: z.string().min(1).max(64).optional(),
  })
  .strict();
/** A parsed `POST /v1/backends` body. */
export type AddBackendRequest = z.infer<typeof AddBackendRequestSchema>;

const WeightVersionWire = z.union([z.string().min(1).max(200), z.number().finite()]);

/**
 * `POST /v1/weights`: the trainer published `version` to the named backends (all when absent);
 * `trainer_version` records the version it has consumed (staleness and `maxStaleness` measure
 * against it).
 */
export const WeightsRequestSchema = z
  .object({
    version: WeightVersionWire,
    backends: z.array(IdSchema).min(1).max(10_000).optional(),
    trainer_version: WeightVersionWire.optional(),
  })
  .strict();
/** A parsed `POST /v1/weights` body. */
export type WeightsRequest = z.infer<typeof WeightsRequestSchema>;

/** A backend with its health and load, as `GET /v1/backends` and the `backends` WS message give it. */
export const BackendInfoSchema = z.object({
  id: z.string(),
  url: z.string(),
  protocol: z.enum(['prorl', 'vllm', 'sglang']),
  state: z.enum(['probing', 'healthy', 'degraded', 'draining', 'removed']),
  inFlight: z.number().int(),
  served: z.number().int(),
  failures: z.number().int(),
  weightVersion: z.union([z.string(), z.number()]).nullable(),
  latencyMs: z.number().nullable(),
});

/** Every error answer: a stable code, a message, and the fields at fault. */
export const ErrorResponseSchema = z.object({
  error: z.object({
    code: z.string(),
    message: z.string(),
    issues: z.array(z.object({ path: z.string(), message: z.string() })),
  }),
});
/** Every error answer. */
export type ErrorResponse = z.infer<typeof ErrorResponseSchema>;

// ---------------------------------------------------------------------------------------------
// WebSocket /v1/events

/**
 * Client → server. `subscribe` opens a subscription named `sub` (the client's choice) to one
 * rollout, one group, or everything (neither given); `after` resumes after a `seq`.
 */
export const WsClientMessageSchema = z.discriminatedUnion('type', [
  z
    .object({
      type: z.literal('subscribe'),
      sub: z.string().min(1).max(100).default('default'),
      rollout: IdSchema.optional(),
      group: IdSchema.optional(),
      /** A rollout buffer (`/v1/buffers`): its complete groups are taken and sent as `buffer` messages as they finish. */
      buffer: IdSchema.optional(),
      /**
       * A buffer subscription's delivery: `auto` (default) — a group counts as delivered once the
       * socket took its frame; `manual` — each group comes with a `lease_id` and stays leased
       * until the client sends `{type:'ack', sub, leases}`, and goes back in line when the
       * subscription ends unacked (at-least-once).
       */
      ack: z.enum(['auto', 'manual']).optional(),
      after: z.number().int().min(-1).optional(),
      /** The epoch `after` belongs to; from an older epoch, the new runtime is replayed from its start. */
      epoch: z.number().int().min(0).optional(),
    })
    .strict(),
  z.object({ type: z.literal('unsubscribe'), sub: z.string().min(1).max(100) }).strict(),
  /** Acks groups of a manual-ack buffer subscription by their `lease_id`s. */
  z.object({ type: z.literal('ack'), sub: z.string().min(1).max(100), leases: LeaseIdsSchema }).strict(),
  z.object({ type: z.literal('ping'), nonce: z.union([z.string().max(200), z.number()]).optional() }).strict(),
]);
/** A parsed client → server WebSocket message. */
export type WsClientMessage = z.infer<typeof WsClientMessageSchema>;

/**
 * Server → client. `event` carries a rollout event (its `seq` is the resume cursor); `gap` says
 * events `from..to` (inclusive) were not delivered on that subscription (retention passed, or the
 * client was too slow) — resubscribe with `after: from - 1` to try to replay them; `heartbeat`
 * comes every heartbeat interval with the latest seq; `backends` is the backend load snapshot.
 */
export const WsServerMessageSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('hello'), epoch: z.number().int(), seq: z.number().int(), heartbeat_ms: z.number().int() }),
  z.object({ type: z.literal('subscribed'), sub: z.string(), epoch: z.number().int(), rollout: z.string().nullable(), group: z.string().nullable(), after: z.number().int().nullable() }),
  z.object({ type: z.literal('unsubscribed'), sub: z.string() }),
  /** The answer to an `ack`: the leases acked, and those the subscription did not hold (unknown, already acked). */
  z.object({ type: z.literal('acked'), sub: z.string(), acked: z.array(z.string()), unknown: z.array(z.string()) }),
  z.object({ type: z.literal('event'), sub: z.string(), event: z.record(z.string(), z.unknown()) }),
  /** A buffer subscription's item: `{type:'group', group}` as each group completes (with `lease_id` under manual acks), then `{type:'done', buffer}`. */
  z.object({ type: z.literal('buffer'), sub: z.string(), item: z.record(z.string(), z.unknown()) }),
  z.object({ type: z.literal('gap'), sub: z.string(), from: z.number().int(), to: z.number().int(), reason: z.enum(['retention', 'slow-client']) }),
  z.object({ type: z.literal('heartbeat'), ts: z.number(), seq: z.number().int() }),
  z.object({ type: z.literal('pong'), nonce: z.union([z.string(), z.number()]).nullable() }),
  z.object({ type: z.literal('backends'), ts: z.number(), backends: z.array(BackendInfoSchema) }),
  z.object({ type: z.literal('error'), error: ErrorResponseSchema.shape.error }),
]);
/** A server → client WebSocket message. */
export type WsServerMessage = z.infer<typeof WsServerMessageSchema>;
