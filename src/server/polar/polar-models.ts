import { z } from 'zod';

/**
 * Polar's trainer-API models (NVIDIA-NeMo/ProRL-Agent-Server, `src/polar`), as zod schemas with
 * Polar's names, fields, types, defaults and constraints, read at these commits:
 * `rollout/models.py` 063c948 (TaskRequest, SessionTiming, SessionResult, TaskResult,
 * TaskStatus), `trajectory/models.py` 467f2ab (StrategySpec, EvaluatorSpec, Trace, Trajectory),
 * `agent/models.py` and `runtime/models.py` c04b814 (jxliu1216's fork: AgentSpec, ExecInput,
 * PrepareAction, RuntimeSpec). Unknown keys are dropped, as pydantic's default `extra="ignore"`.
 *
 * Where Polar refuses a value only later (an unknown harness or builder at dispatch), we refuse
 * it at submit, naming the field, so a bad task never becomes `num_samples` failed sessions.
 */

// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f]/;
const strDict = z.record(z.string(), z.string());
const anyDict = z.record(z.string(), z.unknown());

/** Polar's harness names → the `harness` family's preset names (plus `shell`: a command of the task's own). */
export const POLAR_HARNESSES = {
  codex: 'codex',
  claude_code: 'claude-code',
  qwen_code: 'qwen-code',
  pi: 'pi',
  gemini_cli: 'gemini-cli',
  opencode: 'opencode',
  shell: null,
} as const satisfies Record<string, string | null>;
export type PolarHarness = keyof typeof POLAR_HARNESSES;

/** `ExecInput`: a command with its working directory and environment. */
export const ExecInputSchema = z.object({
  command: z.string(),
  cwd: z.string().nullable().default(null),
  env: strDict.nullable().default(null),
});

/** `PrepareAction`: one ordered step of the runtime's preparation (`upload_file`, `upload_dir`, `exec`). */
export const PrepareActionSchema = z
  .object({
    type: z.enum(['upload_file', 'upload_dir', 'exec']),
    source: z.string().nullable().default(null),
    target: z.string().nullable().default(null),
    command: z.string().nullable().default(null),
    cwd: z.string().nullable().default(null),
    env: strDict.nullable().default(null),
    /** `exec` only: tries at most this many times until the command exits 0 (default 1). */
    max_attempts: z.number().int().min(1).max(100).default(1),
  })
  .superRefine((a, ctx) => {
    if (a.type === 'upload_file' || a.type === 'upload_dir') {
      if (!a.source || !a.target) ctx.addIssue({ code: 'custom', path: [a.source ? 'target' : 'source'], message: `${a.type} requires source and target` });
      for (const f of ['command', 'cwd', 'env'] as const) if (a[f] !== null) ctx.addIssue({ code: 'custom', path: [f], message: `${a.type} must not set ${f}` });
    } else {
      if (!a.command) ctx.addIssue({ code: 'custom', path: ['command'], message: 'exec requires command' });
      for (const f of ['source', 'target'] as const) if (a[f] !== null) ctx.addIssue({ code: 'custom', path: [f], message: `exec must not set ${f}` });
    }
  });
export type PrepareAction = z.infer<typeof PrepareActionSchema>;

/** `RuntimeSpec`: the container a session runs in. Here: an image of the image store, run in our sandbox. */
export const RuntimeSpecSchema = z.object({
  backend: z.enum(['docker', 'apptainer']).default('docker'),
  image: z
    .string()
    .transform((s) => s.trim())
    .refine((s) => s.length > 0, 'runtime image must be non-empty'),
  prepare: z.array(PrepareActionSchema).default([]),
  eval_prepare: z.array(PrepareActionSchema).nullable().default(null),
  env: strDict.default({}),
  network: z.string().nullable().default('host'),
  workdir: z
    .string()
    .transform((s) => s.trim())
    .refine((s) => s.length > 0, 'workdir must be non-empty when provided')
    .nullable()
    .default(null),
  cpus: z.number().int().nullable().default(null),
  memory_mb: z.number().int().nullable().default(null),
  storage_mb: z.number().int().nullable().default(null),
  gpus: z.number().int().default(0),
  allow_internet: z.boolean().default(true),
  import_path: z.string().nullable().default(null),
  kwargs: anyDict.default({}),
});
export type RuntimeSpec = z.infer<typeof RuntimeSpecSchema>;

/** `AgentSpec`: which harness runs the session. Exactly one of `harness` / `import_path`; `custom_shell` exactly with `shell`. */
export const AgentSpecSchema = z
  .object({
    harness: z.string().nullable().default(null),
    import_path: z.string().nullable().default(null),
    model_name: z.string().nullable().default(null),
    settings: anyDict.default({}),
    env: strDict.default({}),
    mcp_servers: z.array(anyDict).default([]),
    skills_path: z.string().nullable().default(null),
    custom_shell: ExecInputSchema.nullable().default(null),
  })
  .superRefine((a, ctx) => {
    if ((a.harness !== null ? 1 : 0) + (a.import_path !== null ? 1 : 0) !== 1) {
      ctx.addIssue({ code: 'custom', path: ['harness'], message: 'exactly one of harness or import_path must be provided' });
      return;
    }
    if (a.import_path !== null) {
      ctx.addIssue({ code: 'custom', path: ['import_path'], message: 'a Python agent class (import_path) cannot run here; use a harness preset or harness "shell"' });
      return;
    }
    if (!Object.hasOwn(POLAR_HARNESSES, a.harness!)) {
      ctx.addIssue({ code: 'custom', path: ['harness'], message: `unknown harness '${a.harness!.slice(0, 100)}'; expected one of: ${Object.keys(POLAR_HARNESSES).join(', ')}` });
      return;
    }
    if (a.custom_shell !== null) {
      if (a.harness !== 'shell') ctx.addIssue({ code: 'custom', path: ['custom_shell'], message: "custom_shell is only valid when agent.harness is 'shell'" });
      if (a.mcp_servers.length > 0) ctx.addIssue({ code: 'custom', path: ['mcp_servers'], message: 'mcp_servers must be omitted when custom_shell is used' });
      if (a.skills_path !== null) ctx.addIssue({ code: 'custom', path: ['skills_path'], message: 'skills_path must be omitted when custom_shell is used' });
      if (!a.custom_shell.command.trim()) ctx.addIssue({ code: 'custom', path: ['custom_shell', 'command'], message: 'must be non-empty' });
    } else if (a.harness === 'shell') {
      ctx.addIssue({ code: 'custom', path: ['custom_shell'], message: "agent.harness='shell' requires custom_shell" });
    }
  });
export type AgentSpec = z.infer<typeof AgentSpecSchema>;

/** The trajectory builders Polar ships (`trajectory/registry.py`) that a trainer names. */
export const BUILDERS = ['per_request', 'prefix_merging'] as const;
export type BuilderName = (typeof BUILDERS)[number];

/** `StrategySpec` as the builder: `per_request` (one trace per LLM call) or `prefix_merging`. */
export const BuilderSpecSchema = z.object({
  strategy: z.enum(BUILDERS, { error: `expected one of: ${BUILDERS.join(', ')}` }),
  config: anyDict.default({}),
});

/** The evaluator strategies served here. */
export const EVALUATORS = ['session_completed', 'test_on_output', 'swebench_harness', 'harbor'] as const;
export type EvaluatorName = (typeof EVALUATORS)[number];

/** `EvaluatorSpec`. */
export const EvaluatorSpecSchema = z.object({
  strategy: z.enum(EVALUATORS, { error: `expected one of: ${EVALUATORS.join(', ')}` }),
  config: anyDict.default({}),
  env: strDict.default({}),
  refresh_runtime: z.boolean().default(false),
});
export type EvaluatorSpec = z.infer<typeof EvaluatorSpecSchema>;

const callbackUrl = z
  .string()
  .refine((s) => {
    try {
      const u = new URL(s);
      return (u.protocol === 'http:' || u.protocol === 'https:') && u.username === '' && u.password === '';
    } catch {
      return false;
    }
  }, 'must be an http:// or https:// URL without credentials')
  .nullable()
  .default(null);

/** `TaskRequest`: what the trainer submits — one instruction, `num_samples` sessions of it. */
export const TaskRequestSchema = z
  .object({
    task_id: z
      .string()
      .min(1)
      .max(1000)
      .refine((s) => !CONTROL.test(s), 'must not contain control characters'),
    instruction: z.string(),
    num_samples: z.number().int().min(1).default(1),
    /** Higher values enter INIT before lower ones still waiting; running sessions are never preempted. */
    dispatch_priority: z.number().int().min(0).max(100).default(0),
    early_stop_min_usable_sessions: z.number().int().min(1).nullable().default(null),
    timeout_seconds: z.number().gt(0).default(600),
    runtime: RuntimeSpecSchema.nullable().default(null),
    agent: AgentSpecSchema,
    builder: BuilderSpecSchema.default({ strategy: 'per_request', config: {} }),
    evaluator: EvaluatorSpecSchema.nullable().default(null),
    callback_url: callbackUrl,
    metadata: anyDict.default({}),
  })
  .superRefine((t, ctx) => {
    if (t.early_stop_min_usable_sessions !== null && t.early_stop_min_usable_sessions > t.num_samples) {
      ctx.addIssue({ code: 'custom', path: ['early_stop_min_usable_sessions'], message: 'early_stop_min_usable_sessions cannot exceed num_samples' });
    }
    const at = t.metadata['agent_timeout'];
    if (at !== undefined && at !== null && !(typeof at === 'number' && Number.isFinite(at) && at > 0)) {
      ctx.addIssue({ code: 'custom', path: ['metadata', 'agent_timeout'], message: 'metadata.agent_timeout must be a positive finite number' });
    }
  });
export type TaskRequest = z.infer<typeof TaskRequestSchema>;

/** Polar's `SessionStatus`: the terminal ones are COMPLETED, ERROR, TIMEOUT. */
export type SessionStatus = 'REGISTERED' | 'INITIALIZING' | 'READY' | 'RUNNING' | 'POST_RUN' | 'BUILDING' | 'EVALUATING' | 'COMPLETED' | 'ERROR' | 'TIMEOUT';

/** `Trace`: one training sequence. `loss_mask` and `response_logprobs` are as long as `response_ids`. */
export interface Trace {
  prompt_ids: number[];
  response_ids: number[];
  loss_mask: (0 | 1)[];
  prompt_messages: Record<string, unknown>[];
  response_messages: Record<string, unknown>[];
  tools: Record<string, unknown>[] | null;
  finish_reason: string | null;
  response_logprobs: number[] | null;
  reward: number | null;
  /** Named parts of `reward` (the issue's field; Polar's own model has none, and pydantic ignores it). */
  reward_components: Record<string, number>;
  metadata: Record<string, unknown>;
}

/** `Trajectory`. */
export interface PolarTrajectory {
  status: 'COMPLETED' | 'TIMEOUT' | 'ERROR';
  metadata: Record<string, unknown>;
  traces: Trace[];
  error: string | null;
}

/** `SessionTiming`, in milliseconds (the fields we measure; the rest of Polar's stay 0). */
export interface SessionTiming {
  register_to_init_queue_ms: number;
  init_ms: number;
  ready_queue_ms: number;
  run_ms: number;
  postrun_ms: number;
  container_start_ms: number;
  agent_exec_ms: number;
  build_ms: number;
  eval_ms: number;
  e2e_ms: number;
}

/** `SessionResult`. */
export interface SessionResult {
  session_id: string;
  task_id: string;
  status: SessionStatus;
  trajectory: PolarTrajectory;
  timing: SessionTiming;
  node_id: string | null;
  error: string | null;
  metadata: Record<string, unknown>;
}

/** The task-level status vocabulary. */
export type TaskState = 'running' | 'cancelling' | 'cancelled' | 'completed' | 'failed';

/** `TaskStatus` (GET / DELETE) and, with its terminal status, `TaskResult` (the callback's body). */
export interface TaskStatus {
  task_id: string;
  status: TaskState;
  total_sessions: number;
  completed_sessions: number;
  results: SessionResult[];
  result_paths: string[];
}
