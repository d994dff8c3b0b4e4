import { z } from 'zod';
import {
  AddBackendRequestSchema,
  AddLlmServerRequestSchema,
  BackendInfoSchema,
  BatchRequestSchema,
  BatchResponseSchema,
  CancelRequestSchema,
  ErrorResponseSchema,
  ListQuerySchema,
  ProcessRequestSchema,
  ProcessResponseSchema,
  RolloutSummaryResponseSchema,
  StatusResponseSchema,
  SubmitRequestSchema,
  SubmitResponseSchema,
  WsClientMessageSchema,
  WeightsRequestSchema,
  WsServerMessageSchema,
} from '../protocol/http.js';
import { RolloutResultSchema } from '../protocol/trajectory.js';
import { ForkRequestSchema, ForkResponseSchema, TreeResponseSchema } from '../protocol/fork.js';
import { BufferAddRequestSchema, BufferCreateRequestSchema, BufferStatsSchema, BufferLeasesRequestSchema, BufferTakeRequestSchema } from '../protocol/buffer.js';
import type { Route, Router } from './router.js';
import { POLAR_OPS } from './polar/polar-openapi.js';

interface Op {
  summary: string;
  request?: z.ZodType;
  response?: z.ZodType;
  status?: number;
}

/** Request and response schemas per `METHOD path`; routes not listed here get a bare entry. */
const OPS: Record<string, Op> = {
  'POST /start': { summary: 'Start the runtime (ProRL)', response: StatusResponseSchema },
  'POST /stop': { summary: 'Stop: pending jobs fail, sandboxes are killed (ProRL)', response: StatusResponseSchema },
  'GET /status': { summary: 'Queue and stage counts; 503 when stopped (ProRL)', response: StatusResponseSchema },
  'POST /process': { summary: 'Run one rollout; held open until it ends (ProRL)', request: ProcessRequestSchema, response: ProcessResponseSchema },
  'POST /cancel': { summary: 'Cancel a job (ProRL)', request: CancelRequestSchema, response: StatusResponseSchema },
  'POST /add_llm_server': { summary: 'Register a backend; buffered while stopped (ProRL)', request: AddLlmServerRequestSchema, response: StatusResponseSchema },
  'POST /clear_llm_server': { summary: 'Remove every backend (ProRL)', response: StatusResponseSchema },
  'GET /healthz': { summary: 'Liveness; open without the token', response: StatusResponseSchema },
  'GET /metrics': { summary: 'Prometheus text exposition' },
  'POST /v1/rollouts': { summary: 'Submit one rollout', request: SubmitRequestSchema, response: SubmitResponseSchema, status: 202 },
  'POST /v1/batches': { summary: 'Submit instances as GRPO groups of n', request: BatchRequestSchema, response: BatchResponseSchema, status: 202 },
  'GET /v1/rollouts': { summary: 'List rollouts (query: state, outcome, group, limit)', response: z.object({ rollouts: z.array(RolloutSummaryResponseSchema), total: z.number().int() }) },
  'GET /v1/rollouts/:id': { summary: 'One rollout: state and result', response: RolloutSummaryResponseSchema.extend({ result: RolloutResultSchema.nullable() }) },
  'POST /v1/rollouts/:id/cancel': { summary: 'Cancel one rollout' },
  'GET /v1/rollouts/:id/tokens': { summary: 'An ended rollout\'s token texts, aligned with result.trajectory.tokens (the visualizer\'s token view)', response: z.object({ id: z.string(), codec: z.string(), assumed: z.boolean(), text: z.array(z.string()) }) },
  'POST /v1/rollouts/:id/fork': { summary: 'Tree rollouts (#26): fork a live rollout into n branches at its next turn boundary (a call or action in flight finishes first); 404 unknown, 409 ended / harness / one already waiting, 429 past capacity, 400 a bad n or atTurn, 503 the sandbox cannot be frozen (the rollout goes on)', request: ForkRequestSchema, response: ForkResponseSchema, status: 202 },
  'GET /v1/groups/:id/tree': { summary: "Tree rollouts (#26): a group's rollouts as a tree (nodes with parent, branch turn, turns, reward, children) and each branch point's reward mean and spread", response: TreeResponseSchema },
  'GET /v1/prefixes/:id': { summary: "Tree rollouts (#26): a shared prefix (its own part; a nested one references its base), held while a branch referencing it is live or retained" },
  'GET /v1/backends': { summary: 'Backends with health and load', response: z.object({ backends: z.array(BackendInfoSchema) }) },
  'POST /v1/backends': { summary: 'Add a backend', request: AddBackendRequestSchema, response: BackendInfoSchema, status: 201 },
  'POST /v1/backends/:id/drain': { summary: 'Drain a backend: no new calls, in-flight ones finish' },
  'DELETE /v1/backends/:id': { summary: 'Remove a backend now; its in-flight calls move elsewhere' },
  'GET /v1/weights': { summary: 'Async RL: paused, trainer_version and each backend\'s weight_version' },
  'POST /v1/weights': { summary: 'Async RL: set the backends\' weight version (all or the named ones) and the trainer\'s', request: WeightsRequestSchema },
  'POST /v1/weights/pause': { summary: 'Async RL: new LLM calls wait (in-flight ones finish); the wait is outside the time budget' },
  'POST /v1/weights/abort': { summary: 'Async RL: abort generations in flight on every engine with SGLang\'s /abort_request; their partial output is kept and resumed' },
  'POST /v1/weights/resume': { summary: 'Async RL: waiting LLM calls go on' },
  'POST /v1/buffers': { summary: 'Async RL: a rollout buffer of GRPO groups (B in flight, over-provisioning, dynamic sampling) with its first prompts', request: BufferCreateRequestSchema, response: BufferStatsSchema, status: 201 },
  'GET /v1/buffers/:id': { summary: 'A rollout buffer\'s counters', response: BufferStatsSchema },
  'POST /v1/buffers/:id/instances': { summary: 'More prompts for a buffer (end: none follow)', request: BufferAddRequestSchema, response: BufferStatsSchema },
  'POST /v1/buffers/:id/take': { summary: 'Up to max complete groups, waiting up to wait_ms for the first; with lease_ms leased (each with a lease_id to ack; back in line when unacked within lease_ms)', request: BufferTakeRequestSchema },
  'POST /v1/buffers/:id/ack': { summary: 'Ack leased groups (by lease_id): delivered for good; unknown lists leases no longer held', request: BufferLeasesRequestSchema },
  'POST /v1/buffers/:id/release': { summary: 'Give leased groups back unacked: back in line, to be handed out again', request: BufferLeasesRequestSchema },
  'GET /v1/buffers/:id/stream': { summary: 'Complete groups as NDJSON lines as they finish; a last {type:"done"} line' },
  'POST /v1/buffers/:id/groups/:group/stop': { summary: 'Stop a running group early: its running members are cancelled, the group comes out with what finished' },
  'DELETE /v1/buffers/:id': { summary: 'Close a buffer: its running rollouts are cancelled and their sandboxes closed' },
};

function schema(s: z.ZodType, io: 'input' | 'output'): unknown {
  return z.toJSONSchema(s, { io, unrepresentable: 'any', target: 'openapi-3.0' });
}

/**
 * The OpenAPI 3.0 document of every route in `routes`, with bodies generated from the zod schemas
 * of src/protocol/http.ts (so the document cannot drift from validation). The WebSocket messages
 * are under `x-websocket` (OpenAPI has no WebSocket operations).
 */
export function buildOpenApi(routes: readonly Route[]): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of routes) {
    const key = `${r.method} ${r.path}`;
    const polar = POLAR_OPS[key];
    const op: Op | undefined = OPS[key] ?? polar;
    const oaPath = r.path.replace(/:(\w+)/g, '{$1}');
    const params = [...r.path.matchAll(/:(\w+)/g)].map((m) => ({ name: m[1], in: 'path', required: true, schema: { type: 'string' } }));
    if (key === 'GET /v1/rollouts') {
      const q = schema(ListQuerySchema, 'input') as { properties?: Record<string, unknown> };
      for (const [name, s] of Object.entries(q.properties ?? {})) params.push({ name, in: 'query', required: false, schema: s as { type: string } });
    }
    for (const q of polar?.query ?? []) params.push({ name: q.name, in: 'query', required: false, schema: q.schema as { type: string } });
    const entry: Record<string, unknown> = {
      summary: op?.summary ?? key,
      ...(params.length ? { parameters: params } : {}),
      // Polar's routes check the token themselves (open to the router): as Bearer or Polar's header.
      ...(polar ? { security: polar.open ? [] : [{ bearer: [] }, { polarToken: [] }] } : r.open ? { security: [] } : {}),
      responses: {
        [String(op?.status ?? 200)]: {
          description: 'success',
          ...(op?.response ? { content: { 'application/json': { schema: schema(op.response, 'output') } } } : {}),
        },
        default: { description: 'error', content: { 'application/json': { schema: schema(ErrorResponseSchema, 'output') } } },
      },
    };
    if (op?.request) entry.requestBody = { required: true, content: { 'application/json': { schema: schema(op.request, 'input') } } };
    (paths[oaPath] ??= {})[r.method.toLowerCase()] = entry;
  }
  return {
    openapi: '3.0.3',
    info: { title: 'rollout-runtime service', version: '0.1.0', description: 'ProRL-compatible rollout service with a native /v1 API and Polar\'s trainer API. See docs/service.md and docs/polar.md.' },
    components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' }, polarToken: { type: 'apiKey', in: 'header', name: 'X-Polar-Control-Token' } } },
    security: [{ bearer: [] }],
    paths,
    'x-websocket': {
      path: '/v1/events',
      client: schema(WsClientMessageSchema, 'input'),
      server: schema(WsServerMessageSchema, 'output'),
    },
  };
}

/** `GET /v1/openapi.json`, built once on first request from the router's routes. */
export function openapiRoute(router: Router): Route {
  let cached: Record<string, unknown> | null = null;
  return {
    method: 'GET',
    path: '/v1/openapi.json',
    handler: () => {
      cached ??= buildOpenApi(router.list());
      return { status: 200, body: cached };
    },
  };
}
