import { BackendError, CancelledError, TaskError } from '../errors.js';
import { abortReason, sleep, systemClock, type Clock } from '../runtime/clock.js';
import type { ChatCodec } from '../llm/chat-codec.js';
import type { GenerateRequest, GenerateResult, LlmClient } from '../llm/llm-client.js';
import type { OracleTurn } from '../protocol/messages.js';

/** What an injected failure does. */
export type ScriptedFailure = 'backend' | 'task' | 'hang' | Error;

/** Options of {@link ScriptedPolicy}. */
export interface ScriptedPolicyOptions {
  codec: ChatCodec;
  clock?: Clock | undefined;
  /** Latency per call in ms (on the clock): a number or a function of the request. */
  latencyMs?: number | ((req: GenerateRequest) => number) | undefined;
  /**
   * Fault injection per call: return `'backend'` (BackendError, retried), `'task'` (TaskError),
   * `'hang'` (never answers until the signal aborts), an Error to throw, or undefined.
   * `n` counts calls across the policy, from 1.
   */
  fail?: ((req: GenerateRequest, n: number) => ScriptedFailure | undefined) | undefined;
  /** Reported as the backend id. Default `scripted`. */
  backendId?: string | undefined;
  /** Reported weight version. Default null. */
  weightVersion?: string | number | null | undefined;
  /** The turn used once `instance.oracle` runs out. Default: plain text `Done.` (no tool call). */
  fallback?: OracleTurn | undefined;
}

/**
 * An in-process {@link LlmClient} that replays `instance.oracle[turn]` through
 * `codec.encodeAssistant`, honouring `maxTokens` (cut → finishReason `length`), with fixed,
 * plausible logprobs (−0.05 … −0.95, cycling). Once the oracle runs out it answers with a plain
 * text turn, which the tool agent treats as the end (`no_tool_call`).
 */
export class ScriptedPolicy implements LlmClient {
  /** Calls made so far. */
  calls = 0;
  /** Calls in flight now. */
  inFlight = 0;
  closed = false;
  private readonly clock: Clock;
  private weightVersion: string | number | null;

  constructor(private readonly opts: ScriptedPolicyOptions) {
    this.clock = opts.clock ?? systemClock;
    this.weightVersion = opts.weightVersion ?? null;
  }

  /** Changes the weight version stamped on later turns. */
  setWeightVersion(v: string | number): void {
    this.weightVersion = v;
  }

  async generate(req: GenerateRequest): Promise<GenerateResult> {
    const n = ++this.calls;
    this.inFlight++;
    try {
      const lat = typeof this.opts.latencyMs === 'function' ? this.opts.latencyMs(req) : (this.opts.latencyMs ?? 0);
      if (lat > 0) await sleep(this.clock, lat, req.signal).catch(rethrowAbort);
      if (req.signal.aborted) throw new CancelledError(abortReason(req.signal).message);
      const fault = this.opts.fail?.(req, n);
      if (fault === 'hang') {
        await new Promise<never>((_, reject) => req.signal.addEventListener('abort', () => reject(new CancelledError('aborted')), { once: true }));
      } else if (fault === 'backend') throw new BackendError(`scripted backend failure at turn ${req.turn}`);
      else if (fault === 'task') throw new TaskError(`scripted task failure at turn ${req.turn}`);
      else if (fault) throw fault;
      const turn = req.instance.oracle?.[req.turn] ?? this.opts.fallback ?? { content: 'Done.' };
      let outputIds = this.opts.codec.encodeAssistant(turn);
      let finishReason: GenerateResult['finishReason'] = 'stop';
      if (outputIds.length > req.maxTokens) {
        outputIds = outputIds.slice(0, Math.max(0, req.maxTokens));
        finishReason = 'length';
      }
      const logprobs = logprobsFor(outputIds.length);
      return { outputIds, logprobs, backendId: this.opts.backendId ?? 'scripted', weightVersion: this.weightVersion, finishReason };
    } finally {
      this.inFlight--;
    }
  }

  async close(): Promise<void> {
    this.closed = true;
  }
}

/** −0.05 … −0.95, cycling; grown on demand and sliced (one allocation of a double array per call). */
let logprobTable: number[] = [];

function logprobsFor(n: number): number[] {
  if (n > logprobTable.length) logprobTable = Array.from({ length: Math.max(n, 2 * logprobTable.length, 256) }, (_, i) => -0.05 - (i % 10) * 0.1);
  return logprobTable.slice(0, n);
}

function rethrowAbort(e: unknown): never {
  if (e instanceof Error && e.name === 'AbortError') throw new CancelledError(e.message);
  throw e;
}
