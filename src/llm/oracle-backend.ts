import type { OracleTurn } from '../protocol/messages.js';
import type { ChatCodec } from './chat-codec.js';
import type { BackendSpec, GenerateRequest, GenerateResult, LlmClient } from './llm-client.js';

/**
 * The address of the oracle backend, the one spelling everywhere a backend is named:
 * `--backend oracle`, `{"backends": ["oracle"]}`, `POST /add_llm_server {"address": "oracle"}`,
 * `createRuntime({ backends: ['oracle'] })`.
 */
export const ORACLE_ADDRESS = 'oracle';

/** The URL of the oracle backend's spec: not an http URL, so no pool ever dials it. */
export const ORACLE_URL = 'oracle:';

/** True when `address` names the oracle backend. */
export function isOracleAddress(address: string): boolean {
  return address.trim() === ORACLE_ADDRESS;
}

/** The spec of the oracle backend (id `oracle`), with `over` applied. */
export function oracleSpec(over: Partial<Omit<BackendSpec, 'url'>> = {}): BackendSpec {
  return { id: ORACLE_ADDRESS, url: ORACLE_URL, protocol: 'prorl', ...over };
}

/** Options of {@link OracleBackend}. */
export interface OracleBackendOptions {
  /** Encodes each oracle turn as the model would have emitted it, for calls that carry no codec of their own (`GenerateRequest.chat.codec`). */
  codec: ChatCodec;
  /** Reported as the backend id. Default `oracle`. */
  backendId?: string | undefined;
  /** Reported weight version. Default null. */
  weightVersion?: string | number | null | undefined;
  /** The turn used once `instance.oracle` runs out. Default: plain text `Done.` (no tool call). */
  fallback?: OracleTurn | undefined;
}

/**
 * The oracle backend: an in-process {@link LlmClient} that replays `instance.oracle[turn]`
 * through `codec.encodeAssistant` instead of asking a model. For dry runs of a task set, the
 * examples, and CI without a GPU: every part of a rollout but the policy is real.
 *
 * It honours `maxTokens` (a longer turn is cut, finishReason `length`) and reports fixed,
 * plausible logprobs (−0.05 … −0.95, cycling). Once the oracle runs out it answers with a plain
 * text turn, which the tool agent treats as the end (`no_tool_call`). It answers at once and
 * never fails; the test double `ScriptedPolicy` (in `rollout-runtime/testing`) adds latency
 * and faults on top.
 */
export class OracleBackend implements LlmClient {
  private weightVersion: string | number | null;

  constructor(private readonly opts: OracleBackendOptions) {
    this.weightVersion = opts.weightVersion ?? null;
  }

  /** Changes the weight version stamped on later turns. */
  setWeightVersion(v: string | number): void {
    this.weightVersion = v;
  }

  async generate(req: GenerateRequest): Promise<GenerateResult> {
    return this.replay(req);
  }

  /** The answer to `req`, synchronously. */
  protected replay(req: GenerateRequest): GenerateResult {
    const turn = req.instance.oracle?.[req.turn] ?? this.opts.fallback ?? { content: 'Done.' };
    // The rollout's own codec (a job may name its model's tokenizer), else the one given here.
    let outputIds = (req.chat?.codec ?? this.opts.codec).encodeAssistant(turn);
    let finishReason: GenerateResult['finishReason'] = 'stop';
    if (outputIds.length > req.maxTokens) {
      outputIds = outputIds.slice(0, Math.max(0, req.maxTokens));
      finishReason = 'length';
    }
    return { outputIds, logprobs: logprobsFor(outputIds.length), backendId: this.opts.backendId ?? ORACLE_ADDRESS, weightVersion: this.weightVersion, finishReason };
  }

  async close(): Promise<void> {}
}

/** −0.05 … −0.95, cycling; grown on demand and sliced (one allocation of a double array per call). */
let logprobTable: number[] = [];

function logprobsFor(n: number): number[] {
  if (n > logprobTable.length) logprobTable = Array.from({ length: Math.max(n, 2 * logprobTable.length, 256) }, (_, i) => -0.05 - (i % 10) * 0.1);
  return logprobTable.slice(0, n);
}
