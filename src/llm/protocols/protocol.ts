import type { SamplingParams } from '../../protocol/instance.js';
import type { BackendProtocol, GenerateRequest, GenerateResult, LogprobSemantics } from '../llm-client.js';

/** What a protocol adapter extracts from a generation response. */
export type ParsedGeneration = Pick<GenerateResult, 'outputIds' | 'logprobs' | 'finishReason' | 'tokenSource' | 'enginePromptIds'> & {
  /** The weight version the server reported with this response, when it reports one. */
  weightVersion?: string | number | null | undefined;
  /** Overrides the protocol's {@link ProtocolAdapter.logprobSemantics} for this answer. */
  logprobSemantics?: LogprobSemantics | undefined;
};

/**
 * One wire protocol of an inference server: where to post, what to send, how to read the
 * answer. Pure functions of their input; the transport lives in `http-backend.ts`.
 */
export interface ProtocolAdapter {
  readonly name: BackendProtocol;
  /** Appended to the backend's base URL. */
  readonly generatePath: string;
  /** A GET answered with 2xx while the server can serve. */
  readonly healthPath: string;
  /** Where to ask for the served model name when the spec names none (vLLM refuses unknown names); absent when the protocol needs no model. */
  readonly modelsPath?: string | undefined;
  /**
   * Dotted paths of body fields some server versions refuse (SGLang's `sampling_params.sampling_seed`,
   * vLLM's `return_token_ids` elsewhere): after a 4xx whose text names one, the backend sends
   * the request once more without it and leaves it out from then on.
   */
  readonly optionalFields?: readonly string[] | undefined;
  /** What the logprobs of this protocol mean by default (a spec may say otherwise). */
  readonly logprobSemantics: LogprobSemantics;
  body(req: GenerateRequest, model: string | undefined): Record<string, unknown>;
  /**
   * Validates and reads a 2xx answer.
   * @throws Error with a readable message when the answer does not fit the protocol (the caller turns it into a BackendError).
   */
  parse(json: unknown, req: GenerateRequest): ParsedGeneration;
}

/**
 * The finish reason of an answer that states none (the reference's ProRL `/generate` format, a
 * vLLM answer with `finish_reason: null`): the stop token decides. A turn whose last sampled id
 * ends a generation (the rollout codec's end-of-turn / EOS ids) stopped, even when it also used
 * its last allowed token; otherwise a turn that used the whole budget was cut (`length`), and a
 * shorter one stopped (a stop string, which the engine does not keep). Without the codec's stop
 * ids only the budget can tell.
 */
export function inferFinishReason(outputIds: readonly number[], req: GenerateRequest): 'stop' | 'length' {
  const stops = req.chat?.codec.stopIds;
  const last = outputIds[outputIds.length - 1];
  if (stops !== undefined && last !== undefined && stops.has(last)) return 'stop';
  return outputIds.length >= req.maxTokens ? 'length' : 'stop';
}

/** Checks that ids and logprobs line up; the trajectory needs one logprob per sampled id. */
export function checkAligned(outputIds: number[], logprobs: number[]): void {
  if (outputIds.length !== logprobs.length) throw new Error(`${outputIds.length} output ids but ${logprobs.length} logprobs`);
}

/**
 * A backend's logprob as a number. A missing (`null`) or non-finite logprob is an error on the
 * turn: read as 0 it would claim probability 1 and skew the policy gradient.
 * @throws Error naming the position.
 */
export function finiteLogprob(x: number | null | undefined, i: number): number {
  if (typeof x !== 'number' || !Number.isFinite(x)) throw new Error(`logprob ${i} is ${x === undefined ? 'missing' : String(x)}, not a finite number`);
  return x;
}

/**
 * `{stop: [...]}` when the sampling parameters carry stop strings (`stop`: a string or a list of
 * strings, as OpenAI and vLLM take it), else `{}`. Anything else under `stop` is ignored here;
 * the submit-time check refuses it.
 */
export function stopOf(s: SamplingParams): { stop?: string[] } {
  const stop = (s as { stop?: unknown }).stop;
  if (typeof stop === 'string') return { stop: [stop] };
  if (Array.isArray(stop) && stop.length > 0 && stop.every((x) => typeof x === 'string')) return { stop: stop as string[] };
  return {};
}
