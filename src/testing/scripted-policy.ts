import { BackendError, CancelledError, TaskError } from '../errors.js';
import { abortReason, sleep, systemClock, type Clock } from '../clock.js';
import type { GenerateRequest, GenerateResult } from '../llm/llm-client.js';
import { OracleBackend, type OracleBackendOptions } from '../llm/oracle-backend.js';

/** What an injected failure does. */
export type ScriptedFailure = 'backend' | 'task' | 'hang' | Error;

/** Options of {@link ScriptedPolicy}: the oracle backend's, plus latency and faults. */
export interface ScriptedPolicyOptions extends OracleBackendOptions {
  clock?: Clock | undefined;
  /** Latency per call in ms (on the clock): a number or a function of the request. */
  latencyMs?: number | ((req: GenerateRequest) => number) | undefined;
  /**
   * Fault injection per call: return `'backend'` (BackendError, retried), `'task'` (TaskError),
   * `'hang'` (never answers until the signal aborts), an Error to throw, or undefined.
   * `n` counts calls across the policy, from 1.
   */
  fail?: ((req: GenerateRequest, n: number) => ScriptedFailure | undefined) | undefined;
}

/**
 * A test double of an inference backend: the {@link OracleBackend}'s replay of
 * `instance.oracle`, after an injected latency (on the clock) and with injected faults, counting
 * its calls. Reports backend id `scripted` unless told otherwise.
 */
export class ScriptedPolicy extends OracleBackend {
  /** Calls made so far. */
  calls = 0;
  /** Calls in flight now. */
  inFlight = 0;
  closed = false;
  private readonly clock: Clock;

  constructor(private readonly policy: ScriptedPolicyOptions) {
    super({ ...policy, backendId: policy.backendId ?? 'scripted' });
    this.clock = policy.clock ?? systemClock;
  }

  override async generate(req: GenerateRequest): Promise<GenerateResult> {
    const n = ++this.calls;
    this.inFlight++;
    try {
      const lat = typeof this.policy.latencyMs === 'function' ? this.policy.latencyMs(req) : (this.policy.latencyMs ?? 0);
      if (lat > 0) await sleep(this.clock, lat, req.signal).catch(rethrowAbort);
      if (req.signal.aborted) throw new CancelledError(abortReason(req.signal).message);
      const fault = this.policy.fail?.(req, n);
      if (fault === 'hang') {
        await new Promise<never>((_, reject) => req.signal.addEventListener('abort', () => reject(new CancelledError('aborted')), { once: true }));
      } else if (fault === 'backend') throw new BackendError(`scripted backend failure at turn ${req.turn}`);
      else if (fault === 'task') throw new TaskError(`scripted task failure at turn ${req.turn}`);
      else if (fault) throw fault;
      return this.replay(req);
    } finally {
      this.inFlight--;
    }
  }

  override async close(): Promise<void> {
    this.closed = true;
  }
}

function rethrowAbort(e: unknown): never {
  if (e instanceof Error && e.name === 'AbortError') throw new CancelledError(e.message);
  throw e;
}
