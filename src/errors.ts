/**
 * The one error hierarchy of the runtime. Every error has a stable `name` and `code`, says
 * whether the runtime retries it, and survives serialization across processes
 * ({@link serializeError} / {@link deserializeError}).
 *
 * Outcome mapping (`classifyEnd` in src/runtime/rollout-outcome.ts):
 * - {@link InfraError} and subclasses → outcome `infra-error`, retried up to the retry budget;
 * - {@link TaskError} → outcome `task-error`, never retried;
 * - {@link RolloutTimeoutError} → outcome `timed-out`;
 * - {@link CancelledError} → outcome `cancelled`.
 */

/** The classes of the hierarchy, by name (as `RolloutError.name` and `SerializedError.name` carry them). */
export type ErrorClassName =
  | 'InfraError'
  | 'SandboxError'
  | 'BackendError'
  | 'StaleRolloutError'
  | 'TaskError'
  | 'RolloutTimeoutError'
  | 'CancelledError'
  | 'ValidationError'
  | 'QueueFullError'
  | 'RuntimeClosedError'
  | 'ProtocolError'
  | 'ForkError';

/**
 * Every error code the runtime throws: its class, whether the supervisor retries a rollout that
 * failed with it, and what it means. One place to read them (Temporal's `TimeoutType`, BullMQ's
 * error codes); `test/unit/errors.test.ts` fails when a `code: '…'` in src/ is missing here or
 * thrown with another class, so a new code is added here first.
 */
export const ERROR_CODES = {
  // InfraError: the infrastructure's fault, retried within the retry budget.
  INFRA: { class: 'InfraError', retryable: true, means: 'an unexpected fault (anything thrown that is not a RolloutError)' },
  CHANNEL_CLOSED: { class: 'InfraError', retryable: true, means: 'the IPC channel to a sandbox host closed under a request' },
  CHANNEL_CONNECT: { class: 'InfraError', retryable: true, means: 'could not connect to a sandbox host socket' },
  IPC_TIMEOUT: { class: 'InfraError', retryable: true, means: 'a sandbox host did not answer a request in time' },
  CLUSTER_JOB_FAILED: { class: 'InfraError', retryable: true, means: 'a cluster job failed outside its rollout (the worker could not run it)' },
  STALE_TOKENS: { class: 'InfraError', retryable: true, means: "the rollout's tokens are older than the staleness bound allows" },
  ENGINE_NOT_INSTALLED: { class: 'InfraError', retryable: true, means: 'node-llama-cpp (the optional peer dependency of llm-serve) is not installed' },
  IMAGE_DISK_FULL: { class: 'InfraError', retryable: true, means: 'the image store ran out of disk' },
  IMAGE_IO: { class: 'InfraError', retryable: true, means: 'the image store hit an I/O error' },
  // SandboxError (an InfraError): retried.
  SANDBOX: { class: 'SandboxError', retryable: true, means: 'a sandbox fault' },
  SANDBOX_START: { class: 'SandboxError', retryable: true, means: "the sandbox's shell did not start" },
  SANDBOX_HARNESS_STORE: { class: 'SandboxError', retryable: true, means: 'the harness store could not be bound into the sandbox' },
  SANDBOX_LOST: { class: 'SandboxError', retryable: true, means: 'the sandbox or its host died under the rollout' },
  SANDBOX_CLOSED: { class: 'SandboxError', retryable: true, means: 'an operation on a closed sandbox' },
  SANDBOX_EXISTS: { class: 'SandboxError', retryable: true, means: 'a sandbox id already in use on its host' },
  SANDBOX_FS: { class: 'SandboxError', retryable: true, means: "a sandbox's file system could not be prepared" },
  SANDBOX_NETWORK: { class: 'SandboxError', retryable: true, means: "a sandbox's network could not be set up" },
  SANDBOX_LLM_PROXY: { class: 'SandboxError', retryable: true, means: "the sandbox's LLM proxy socket could not be reached" },
  STATE_DIR_UNREACHABLE: { class: 'SandboxError', retryable: true, means: "the sandbox user cannot reach the runtime's state directory" },
  PROVIDER_CLOSED: { class: 'SandboxError', retryable: true, means: 'the sandbox provider is closed' },
  PYTHON_START: { class: 'SandboxError', retryable: true, means: 'the Python REPL did not start' },
  OVERLAY_FAILED: { class: 'SandboxError', retryable: true, means: "an image sandbox's overlay could not be mounted" },
  SANDBOX_BUSY: { class: 'SandboxError', retryable: true, means: 'a sandbox was asked to fork while a command or cell ran in it (a fork waits for a turn boundary)' },
  FREEZE_UNAVAILABLE: { class: 'SandboxError', retryable: true, means: "a sandbox's processes cannot be frozen for a fork (no cgroup freezer controller, or the 'none' driver)" },
  FORK_FAILED: { class: 'SandboxError', retryable: true, means: "a sandbox fork's snapshot or one of its branches could not be made (the parent is left as it was)" },
  ACTION_TIMEOUT: { class: 'SandboxError', retryable: true, means: 'a tool action ran past its limit' },
  ENOENT: { class: 'SandboxError', retryable: true, means: 'no such file in a memory sandbox (src/testing)' },
  // BackendError (an InfraError): retried.
  BACKEND: { class: 'BackendError', retryable: true, means: 'an inference backend failed (refused, 5xx, timeout, malformed)' },
  BAD_RESPONSE: { class: 'BackendError', retryable: true, means: "a backend's answer does not fit the request (ids, logprobs)" },
  LLM_TIMEOUT: { class: 'BackendError', retryable: true, means: 'an LLM call ran past llmTimeoutMs' },
  CONTEXT_LIMIT: { class: 'BackendError', retryable: false, means: "the engine refused a call for its context, or the first prompt alone fills it: max_model_len / max_tokens do not fit the engine (a configuration mistake, never a truncated rollout)" },
  NO_BACKEND: { class: 'BackendError', retryable: true, means: 'no backend is configured or healthy' },
  // StaleRolloutError (an InfraError): retried.
  STALE: { class: 'StaleRolloutError', retryable: true, means: 'no progress for staleAfterMs' },
  // TaskError: the task is broken, never retried.
  TASK: { class: 'TaskError', retryable: false, means: 'bad instance data' },
  UNKNOWN_DATA_SOURCE: { class: 'TaskError', retryable: false, means: 'no handler serves the data_source' },
  BAD_SPEC: { class: 'TaskError', retryable: false, means: 'a sandbox spec that cannot be honoured' },
  BAD_FILES: { class: 'TaskError', retryable: false, means: "an instance's file path is outside the workspace or malformed" },
  BAD_IMAGE_FIELD: { class: 'TaskError', retryable: false, means: 'instance.image is not the name or digest of an image' },
  BAD_REWARD: { class: 'TaskError', retryable: false, means: 'a handler returned a reward that is not a finite number' },
  BAD_TEST_PATCH: { class: 'TaskError', retryable: false, means: "a SWE task's test patch does not apply" },
  CONTEXT_FULL: { class: 'TaskError', retryable: false, means: 'the server says the prompt is too long (the loops turn it into CONTEXT_LIMIT: runtime/context-limit.ts)' },
  BAD_TEST_FILES: { class: 'TaskError', retryable: false, means: "a swe row's test file path is absolute or leaves the workspace" },
  BACKEND_REJECTED: { class: 'TaskError', retryable: false, means: 'a backend refused the request itself (4xx: the prompt, not the backend)' },
  HARNESS_ACT: { class: 'TaskError', retryable: false, means: "act was called on the harness family (its agent drives itself)" },
  READ_FAILED: { class: 'TaskError', retryable: false, means: 'a workspace file could not be read' },
  SEED_FAILED: { class: 'TaskError', retryable: false, means: "the instance's files could not be written into the sandbox" },
  SETUP_FAILED: { class: 'TaskError', retryable: false, means: "the instance's setup commands failed" },
  IMAGE_NOT_FOUND: { class: 'TaskError', retryable: false, means: 'the image is not in the store' },
  IMAGE_CORRUPT: { class: 'TaskError', retryable: false, means: 'an image archive or layer is corrupt' },
  IMAGE_DIGEST_MISMATCH: { class: 'TaskError', retryable: false, means: "a layer's content does not match its digest" },
  IMAGE_UNSAFE_ENTRY: { class: 'TaskError', retryable: false, means: 'a layer entry would leave the image root' },
  IMAGE_UNSUPPORTED: { class: 'TaskError', retryable: false, means: 'an image format or feature the store does not read' },
  IMAGE_ENTRYPOINT_FAILED: { class: 'TaskError', retryable: false, means: "the image's entrypoint failed" },
  IMAGE_USER_UNKNOWN: { class: 'TaskError', retryable: false, means: "the image's configured user does not exist in it" },
  IMAGE_WORKDIR: { class: 'TaskError', retryable: false, means: "the image's WorkingDir cannot be made a directory inside the image" },
  IMAGE_NO_SHELL: { class: 'TaskError', retryable: false, means: 'the image has no executable /bin/bash (the sandbox shell)' },
  HARNESS_NOT_INSTALLED: { class: 'TaskError', retryable: false, means: "a harness preset's CLI (at that version) is not in the harness store: rollout harness install NAME[@VERSION]" },
  INTEGRITY_VIOLATION: { class: 'TaskError', retryable: false, means: "the policy broke the rollout's integrity policy under on_violation: fail (details.cause 'integrity')" },
  INTEGRITY_POLICY: { class: 'TaskError', retryable: false, means: 'an integrity glob the sandbox host cannot read (validated at submit; only a client that skipped it)' },
  INTEGRITY_NOT_STARTED: { class: 'TaskError', retryable: false, means: 'an integrity observation was asked of a sandbox whose monitor was never started' },
  // RolloutTimeoutError: outcome timed-out, not retried.
  TIMEOUT: { class: 'RolloutTimeoutError', retryable: false, means: 'a time limit ran out' },
  BUDGET: { class: 'RolloutTimeoutError', retryable: false, means: "the rollout's time budget (budgetMs) ran out" },
  WALL_CLOCK: { class: 'RolloutTimeoutError', retryable: false, means: "the rollout's wall-clock cap ran out" },
  // The rest: never retried.
  CANCELLED: { class: 'CancelledError', retryable: false, means: 'cancelled by its submitter or by shutdown' },
  VALIDATION: { class: 'ValidationError', retryable: false, means: 'input failed validation (the issues name each field)' },
  QUEUE_FULL: { class: 'QueueFullError', retryable: false, means: 'the admission queue is full (backpressure)' },
  CLOSED: { class: 'RuntimeClosedError', retryable: false, means: 'the runtime is closing or closed' },
  PROTOCOL: { class: 'ProtocolError', retryable: false, means: 'a peer broke the wire protocol' },
  BAD_ENVELOPE: { class: 'ProtocolError', retryable: false, means: 'an IPC message without a valid type or id' },
  BAD_ERROR_REPLY: { class: 'ProtocolError', retryable: false, means: 'an IPC error reply that does not parse' },
  BAD_REQUEST: { class: 'ProtocolError', retryable: false, means: 'a sandbox host request that does not parse' },
  FRAME_TOO_LARGE: { class: 'ProtocolError', retryable: false, means: 'an IPC frame over maxFrameBytes' },
  NOT_A_MAP: { class: 'ProtocolError', retryable: false, means: 'an IPC frame whose body is not a map' },
  UNDECODABLE: { class: 'ProtocolError', retryable: false, means: 'an IPC frame that is not msgpack' },
  NO_HANDLER: { class: 'ProtocolError', retryable: false, means: 'an IPC request to a channel that answers none' },
  // ForkError: a fork (#26) refused; the rollout asked to fork goes on untouched. Never retried.
  FORK_NOT_FOUND: { class: 'ForkError', retryable: false, means: 'no live rollout has that id (HTTP 404)' },
  FORK_ENDED: { class: 'ForkError', retryable: false, means: 'the rollout ended (or its attempt did) before the turn boundary the fork waits for (HTTP 409)' },
  FORK_UNSUPPORTED: { class: 'ForkError', retryable: false, means: "the rollout's agent runs outside the runtime (a harness) or its sandbox cannot fork (HTTP 409)" },
  FORK_BUSY: { class: 'ForkError', retryable: false, means: 'the rollout already waits for a fork at its next turn boundary (HTTP 409)' },
  NO_HELLO: { class: 'ProtocolError', retryable: false, means: 'a sandbox host request before the hello' },
} as const satisfies Record<string, { class: ErrorClassName; retryable: boolean; means: string }>;

/** A code of {@link ERROR_CODES}. */
export type ErrorCode = keyof typeof ERROR_CODES;

/** Plain-object form of an error, as it crosses a process boundary. */
export interface SerializedError {
  name: string;
  code: string;
  message: string;
  retryable: boolean;
  /** Which stage it happened in, when known: `init`, `run`, `eval`. */
  stage?: 'init' | 'run' | 'eval' | undefined;
  details?: Record<string, unknown> | undefined;
  cause?: SerializedError | undefined;
}

/** A stage of a rollout: where an error happened. */
type Stage = 'init' | 'run' | 'eval';

/** Base class. Not thrown directly; use a subclass. */
export class RolloutError extends Error {
  /** Stable machine-readable code, e.g. `INFRA`, `TASK`, `QUEUE_FULL`. */
  readonly code: string;
  /** Whether the supervisor retries a rollout that failed with this error. */
  readonly retryable: boolean;
  stage?: 'init' | 'run' | 'eval' | undefined;
  readonly details?: Record<string, unknown> | undefined;

  constructor(
    message: string,
    opts: {
      code: string;
      retryable: boolean;
      stage?: 'init' | 'run' | 'eval';
      details?: Record<string, unknown>;
      cause?: unknown;
    },
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = new.target.name;
    this.code = opts.code;
    this.retryable = opts.retryable;
    this.stage = opts.stage;
    this.details = opts.details;
  }
}

/** A fault of the infrastructure (sandbox, backend, runtime). Retried within the budget. */
export class InfraError extends RolloutError {
  /** `retryable: false` for a fault another attempt would meet again (a configuration mistake). */
  constructor(message: string, opts: { code?: string; stage?: 'init' | 'run' | 'eval'; details?: Record<string, unknown>; cause?: unknown; retryable?: boolean } = {}) {
    super(message, { code: opts.code ?? 'INFRA', retryable: true, ...opts });
  }
}

/** A sandbox failed to start, died under the rollout, or refused an operation. Retried. */
export class SandboxError extends InfraError {
  constructor(message: string, opts: { code?: string; stage?: 'init' | 'run' | 'eval'; details?: Record<string, unknown>; cause?: unknown } = {}) {
    super(message, { code: opts.code ?? 'SANDBOX', ...opts });
  }
}

/** An LLM backend failed (connection refused, 5xx, timeout) or none is available. Retried. */
export class BackendError extends InfraError {
  constructor(message: string, opts: { code?: string; stage?: 'init' | 'run' | 'eval'; details?: Record<string, unknown>; cause?: unknown; retryable?: boolean } = {}) {
    super(message, { code: opts.code ?? 'BACKEND', ...opts });
  }
}

/** The rollout was stuck: no progress for `staleAfterMs`. Retried as an infra error. */
export class StaleRolloutError extends InfraError {
  constructor(message: string, opts: { stage?: 'init' | 'run' | 'eval'; details?: Record<string, unknown> } = {}) {
    super(message, { code: 'STALE', ...opts });
  }
}

/** Bad instance data or an unknown task: the task itself is broken. Never retried. */
export class TaskError extends RolloutError {
  constructor(message: string, opts: { code?: string; stage?: 'init' | 'run' | 'eval'; details?: Record<string, unknown>; cause?: unknown } = {}) {
    super(message, { code: opts.code ?? 'TASK', retryable: false, ...opts });
  }
}

/** The rollout's time budget or wall-clock cap ran out. Not retried. */
export class RolloutTimeoutError extends RolloutError {
  constructor(message: string, opts: { code?: string; stage?: 'init' | 'run' | 'eval'; details?: Record<string, unknown> } = {}) {
    super(message, { code: opts.code ?? 'TIMEOUT', retryable: false, ...opts });
  }
}

/** The rollout was cancelled by its submitter or by shutdown. Not retried. */
export class CancelledError extends RolloutError {
  constructor(message = 'cancelled', opts: { details?: Record<string, unknown> } = {}) {
    super(message, { code: 'CANCELLED', retryable: false, ...opts });
  }
}

/** Input (options, an instance, an HTTP body) failed validation. Names the field. Not retried. */
export class ValidationError extends RolloutError {
  /** Each problem: the dotted path of the field and what is wrong with it. */
  readonly issues: { path: string; message: string }[];
  constructor(message: string, issues: { path: string; message: string }[] = []) {
    super(message, { code: 'VALIDATION', retryable: false, details: { issues } });
    this.issues = issues;
  }
}

/** The admission queue is full (backpressure). The caller may submit again later. */
export class QueueFullError extends RolloutError {
  constructor(message: string, details?: Record<string, unknown>) {
    super(message, { code: 'QUEUE_FULL', retryable: false, ...(details ? { details } : {}) });
  }
}

/** The runtime is closing or closed and takes no new work. */
export class RuntimeClosedError extends RolloutError {
  constructor(message = 'runtime is closed') {
    super(message, { code: 'CLOSED', retryable: false });
  }
}

/** A peer sent a frame or message that does not fit the protocol. The connection is closed. */
export class ProtocolError extends RolloutError {
  constructor(message: string, opts: { code?: string; details?: Record<string, unknown>; cause?: unknown } = {}) {
    super(message, { code: opts.code ?? 'PROTOCOL', retryable: false, ...opts });
  }
}

/**
 * A fork (#26) the runtime refuses: the rollout is unknown, ended, or cannot be forked. Not
 * retried; the rollout asked to fork is left as it was. Codes `FORK_*` of {@link ERROR_CODES}.
 */
export class ForkError extends RolloutError {
  constructor(message: string, opts: { code: string; details?: Record<string, unknown> }) {
    super(message, { retryable: false, ...opts });
  }
}

/**
 * Normalizes anything thrown into a {@link RolloutError}. An `AbortError` becomes a
 * {@link CancelledError}; any other unknown value becomes an {@link InfraError} (an unexpected
 * fault is the runtime's, not the task's), keeping the original as `cause`.
 */
export function toRolloutError(err: unknown, stage?: 'init' | 'run' | 'eval'): RolloutError {
  let out: RolloutError;
  if (err instanceof RolloutError) out = err;
  else if (err instanceof Error && err.name === 'AbortError') out = new CancelledError(err.message);
  else if (err instanceof Error) out = new InfraError(err.message, { cause: err });
  else out = new InfraError(typeof err === 'string' ? err : `non-error thrown: ${safeString(err)}`);
  if (stage && out.stage === undefined) out.stage = stage;
  return out;
}

/** Serializes an error to a plain object that {@link deserializeError} turns back into the same class. */
export function serializeError(err: unknown): SerializedError {
  const e = toRolloutError(err);
  const cause = e.cause instanceof RolloutError ? serializeError(e.cause) : undefined;
  return {
    name: e.name,
    code: e.code,
    message: e.message,
    retryable: e.retryable,
    ...(e.stage ? { stage: e.stage } : {}),
    ...(e.details ? { details: e.details } : {}),
    ...(cause ? { cause } : {}),
  };
}

type Reviver = (s: SerializedError, o: { code: string; stage?: Stage; details?: Record<string, unknown>; cause?: unknown }) => RolloutError;

/** How each class is rebuilt from its serialized form: one entry per class, through its own constructor. */
const revivers: Record<string, Reviver> = {
  InfraError: (s, o) => new InfraError(s.message, { ...o, retryable: s.retryable }),
  SandboxError: (s, o) => new SandboxError(s.message, o),
  BackendError: (s, o) => new BackendError(s.message, { ...o, retryable: s.retryable }),
  StaleRolloutError: (s, o) => new StaleRolloutError(s.message, { stage: o.stage, details: o.details }),
  TaskError: (s, o) => new TaskError(s.message, o),
  RolloutTimeoutError: (s, o) => new RolloutTimeoutError(s.message, { code: o.code, stage: o.stage, details: o.details }),
  CancelledError: (s, o) => new CancelledError(s.message, { details: o.details }),
  ValidationError: (s) => new ValidationError(s.message, issuesOf(s.details)),
  QueueFullError: (s) => new QueueFullError(s.message, s.details),
  RuntimeClosedError: (s) => new RuntimeClosedError(s.message),
  ProtocolError: (s, o) => new ProtocolError(s.message, o),
  ForkError: (s, o) => new ForkError(s.message, { code: o.code, ...(o.details ? { details: o.details } : {}) }),
};

/**
 * Rebuilds a {@link RolloutError} of the original class with its code, stage, details and
 * (serialized) cause, or a base one carrying the name, code and retryability of a class this
 * process does not know. Round-trips every class of this file (see its table test).
 */
export function deserializeError(s: SerializedError): RolloutError {
  const cause = s.cause ? deserializeError(s.cause) : undefined;
  const opts = { code: s.code, stage: s.stage, details: s.details, ...(cause ? { cause } : {}) };
  const revive = revivers[s.name];
  let e: RolloutError;
  if (revive) e = revive(s, opts);
  else {
    e = new RolloutError(s.message, { ...opts, retryable: s.retryable });
    e.name = s.name;
  }
  if (s.stage) e.stage = s.stage;
  return e;
}

function issuesOf(details: Record<string, unknown> | undefined): { path: string; message: string }[] {
  const issues = details?.['issues'];
  return Array.isArray(issues) ? issues.filter((i): i is { path: string; message: string } => typeof i?.path === 'string' && typeof i?.message === 'string') : [];
}

function safeString(v: unknown): string {
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}
