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
