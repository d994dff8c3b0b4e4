import type { Instance, SamplingParams } from '../protocol/instance.js';

/** One generation request, token-in. */
export interface GenerateRequest {
  rolloutId: string;
  /** The instance, for policies that need it (the scripted policy replays `instance.oracle`). */
  instance: Instance;
  /** 0-based assistant turn index. */
  turn: number;
  promptIds: number[];
  /** min(configured max output tokens, context left). */
  maxTokens: number;
  sampling: SamplingParams;
  /** The backend of the previous turn, to keep prefix-cache hits. */
  preferredBackendId?: string | undefined;
  signal: AbortSignal;
}

/** One generation result, token-out. */
export interface GenerateResult {
  outputIds: number[];
  /** One logprob per output id. */
  logprobs: number[];
  backendId: string;
  weightVersion: string | number | null;
  finishReason: 'stop' | 'length' | 'abort';
}

/**
 * Something that turns prompt ids into sampled ids: one backend, or a pool of them. Throws
 * BackendError (retried by the runtime) when no backend could serve, TaskError on a 4xx the
 * request itself caused, CancelledError when `signal` aborts.
 */
export interface LlmClient {
  generate(req: GenerateRequest): Promise<GenerateResult>;
  /** Stops probes and closes connections. */
  close?(): Promise<void>;
}
