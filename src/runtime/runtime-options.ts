import { z } from 'zod';
import { ValidationError } from '../errors.js';
import type { LlmClient } from '../llm/llm-client.js';
import type { ChatCodec } from '../llm/chat-codec.js';
import type { SandboxProvider } from '../sandbox/sandbox.js';
import type { AgentHandler } from '../proxy/agent-contract.js';
import type { Clock } from '../clock.js';

const limit = z.number().int().positive().max(1_000_000);
const ms = z.number().int().nonnegative();
const positiveMs = z.number().int().positive();

/**
 * Every option of a runtime, with its default. Parsed once by {@link parseRuntimeOptions} and
 * frozen. Durations are milliseconds on the injected clock.
 */
export const RuntimeOptionsSchema = z
  .object({
    /** Concurrency of the INIT / RUN / EVAL stage pools. `eval` defaults to `run`. */
    stages: z
      .object({ init: limit.default(64), run: limit.default(64), eval: limit.optional() })
      .default({ init: 64, run: 64 }),
    /** Rollouts admitted but not yet holding an INIT slot (including ones waiting to retry). Beyond it, submit throws QueueFullError. */
    maxQueued: limit.default(50_000),
    /** Time budget per attempt, counted only inside initializing, llmCalling, acting and evaluating (not slot waits). */
    budgetMs: positiveMs.default(300_000),
    /** Hard cap from submission to result, across attempts and queue waits. */
    wallClockMs: positiveMs.default(3_600_000),
    /** One LLM call longer than this fails the attempt as BackendError `LLM_TIMEOUT` (retried). */
    llmTimeoutMs: positiveMs.default(600_000),
    /** One `act` (all tool calls of a turn) longer than this fails the attempt as SandboxError `ACTION_TIMEOUT` (retried). */
    actionTimeoutMs: positiveMs.default(300_000),
    /** Retries of infra-errors: attempts = 1 + up to `max`; backoff doubles from `backoffMs` up to `backoffMaxMs`. */
    retries: z
      .object({ max: z.number().int().nonnegative().max(100).default(2), backoffMs: ms.default(1_000), backoffMaxMs: ms.default(30_000) })
      .default({ max: 2, backoffMs: 1_000, backoffMaxMs: 30_000 }),
    /** No state change or event for this long inside a stage → InfraError `STALE` (retried). */
    staleAfterMs: positiveMs.default(900_000),
    /** How long a rollout's end waits for its sandboxes to close before resolving anyway (a hung provider must not hang results). */
    closeTimeoutMs: positiveMs.default(30_000),
    /** Period of the deadline sweep; deadlines fire up to this late. */
    sweepIntervalMs: positiveMs.default(250),
    /** Assistant turns per rollout when `sampling.max_iterations` is absent. The reference's default of 2 is a trap; 35 matches its examples. */
    maxIterations: z.number().int().positive().default(35),
    /** Tokens per assistant turn when `sampling.max_output_tokens` is absent. */
    maxOutputTokens: z.number().int().positive().default(2048),
    /** Context window when `sampling.max_model_len` is absent. */
    maxModelLen: z.number().int().positive().default(32_768),
    /** Compare each prompt with a full re-render (costs a render per turn). */
    detectDrift: z.boolean().default(false),
    events: z
      .object({
        /** Events kept for resume from a cursor. 0 = none (then events cost nothing with no subscriber). */
        retain: z.number().int().nonnegative().default(0),
        /** Default per-subscriber buffer. */
        bufferSize: z.number().int().positive().default(10_000),
      })
      .default({ retain: 0, bufferSize: 10_000 }),
    /**
     * Bound on a rollout's oldest token (async RL): before each LLM call after the first, a rollout
     * whose oldest sampled token is more than `maxAge` versions behind the trainer's version is
     * `flag`ged (`diagnostics.staleTokens`), `finish`ed (truncated, finish `stale_tokens`, still
     * evaluated) or `restart`ed (InfraError `STALE_TOKENS`, retried from its prompt). Off when absent.
     */
    staleTokens: z.object({ maxAge: z.number().int().nonnegative(), action: z.enum(['flag', 'finish', 'restart']).default('flag') }).strict().optional(),
    /** Finished rollouts kept for `get`/`list`. */
    retainResults: z.number().int().nonnegative().default(1_000),
    /**
     * Inference servers for the default backend pool, as addresses (`http://h:p`, `vllm+http://…`,
     * `sglang+http://…`, `prorl+http://…`). Ignored when `llm` is given. With neither, the runtime
     * uses the in-process scripted policy, which replays `instance.oracle` (not a model).
     */
    backends: z.array(z.string().min(1).max(2048)).default([]),
    /**
     * Bounded staleness (AReaL's η, async RL): a rollout's first LLM call waits while the newest
     * backend weight version is more than this many versions ahead of the trainer's
     * (`setTrainerVersion`). Absent: no bound. Applies only when both versions are numbers.
     */
    maxStaleness: z.number().int().nonnegative().max(1_000_000).optional(),
    /** Sandbox driver of the default sandbox provider: `auto` picks bwrap, then unshare. Ignored when `sandboxes` is given. */
    sandboxDriver: z.enum(['auto', 'bwrap', 'unshare', 'none']).default('auto'),
    llm: z.custom<LlmClient>((v) => typeof (v as LlmClient | undefined)?.generate === 'function', 'expected an LlmClient (an object with generate())').optional(),
    sandboxes: z
      .custom<SandboxProvider>((v) => typeof (v as SandboxProvider | undefined)?.create === 'function', 'expected a SandboxProvider (an object with create())')
      .optional(),
    codec: z.custom<ChatCodec>((v) => typeof (v as ChatCodec | undefined)?.encodePrompt === 'function', 'expected a ChatCodec').optional(),
    /** A Hugging Face model directory for the default codec (ignored when `codec` is given); absent: Qwen3. */
    tokenizer: z.string().min(1).max(4096).optional(),
    /** Tool-call format of the default codec (`hermes`, `qwen3_coder`, `llama3_json`, `mistral`, `deepseek_v3`); absent: the template's. */
    toolParser: z.string().min(1).max(64).optional(),
    /** Handlers added to (and overriding by name) the built-in ones. */
    handlers: z.array(z.custom<AgentHandler>((v) => typeof (v as AgentHandler | undefined)?.name === 'string', 'expected an AgentHandler')).default([]),
    /** Register `builtinHandlers` (default true). */
    builtinHandlers: z.boolean().default(true),
    clock: z.custom<Clock>((v) => typeof (v as Clock | undefined)?.now === 'function', 'expected a Clock').optional(),
    /** Passed as `inspect` to every rollout actor's createActor. */
    inspect: z.custom<unknown>((v) => typeof v === 'function' || (typeof v === 'object' && v !== null), 'expected an inspection observer').optional(),
  })
  .strict();

/** Options as the caller writes them. */
export type RuntimeOptionsInput = z.input<typeof RuntimeOptionsSchema>;

/** Options after defaults, frozen. */
export type RuntimeOptions = Readonly<
  Omit<z.output<typeof RuntimeOptionsSchema>, 'stages'> & { stages: Readonly<{ init: number; run: number; eval: number }> }
>;

/**
 * Validates options and applies defaults. Throws {@link ValidationError} naming each bad field
 * by its dotted path (e.g. `stages.init`, `retries.max`).
 */
export function parseRuntimeOptions(input: unknown = {}): RuntimeOptions {
  const r = RuntimeOptionsSchema.safeParse(input ?? {});
  if (!r.success) {
    const issues = r.error.issues.map((i) => ({ path: i.path.map(String).join('.') || '(root)', message: i.message }));
    throw new ValidationError(`invalid runtime options: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`, issues);
  }
  const o = r.data;
  const stages = Object.freeze({ init: o.stages.init, run: o.stages.run, eval: o.stages.eval ?? o.stages.run });
  if (o.retries.backoffMaxMs < o.retries.backoffMs) {
    throw new ValidationError('invalid runtime options: retries.backoffMaxMs: must be >= retries.backoffMs', [
      { path: 'retries.backoffMaxMs', message: 'must be >= retries.backoffMs' },
    ]);
  }
  return Object.freeze({
    ...o,
    stages,
    retries: Object.freeze(o.retries),
    events: Object.freeze(o.events),
    handlers: Object.freeze([...o.handlers]) as AgentHandler[],
  });
}
