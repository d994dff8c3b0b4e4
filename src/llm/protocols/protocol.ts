import type { GenerateRequest, GenerateResult } from '../llm-client.js';

/** What a protocol adapter extracts from a generation response. */
export type ParsedGeneration = Pick<GenerateResult, 'outputIds' | 'logprobs' | 'finishReason'> & {
  /** The weight version the server reported with this response, when it reports one. */
  weightVersion?: string | number | null | undefined;
};

/**
 * One wire protocol of an inference server: where to post, what to send, how to read the
 * answer. Pure functions of their input; the transport lives in `http-backend.ts`.
 */
export interface ProtocolAdapter {
  readonly name: 'prorl' | 'vllm' | 'sglang';
  readonly generatePath: string;
  /** A GET answered with 2xx while the server can serve. */
  readonly healthPath: string;
  body(req: GenerateRequest, model: string | undefined): unknown;
  /**
   * Validates and reads a 2xx answer.
   * @throws Error with a readable message when the answer does not fit the protocol (the caller turns it into a BackendError).
   */
  parse(json: unknown, req: GenerateRequest): ParsedGeneration;
}

/** Checks that ids and logprobs line up; the trajectory needs one logprob per sampled id. */
export function checkAligned(outputIds: number[], logprobs: number[]): void {
  if (outputIds.length !== logprobs.length) throw new Error(`${outputIds.length} output ids but ${logprobs.length} logprobs`);
}
