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
  /** The model (codec name) the prompt was tokenized for: only backends serving it may take the call. */
  model?: string | undefined;
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

/** How to reach one inference server. */
export interface BackendSpec {
  /** Stable id; derived from the URL when absent. */
  id?: string | undefined;
  /** `http://host:port`. */
  url: string;
  protocol: 'prorl' | 'vllm' | 'sglang';
  /** Model name for OpenAI-style routes (vLLM). */
  model?: string | undefined;
  weightVersion?: string | number | null | undefined;
  /**
   * The codec name of the tokenizer this backend serves (`codecFor({tokenizer}).name`); a call
   * for another model never goes to it. Absent: serves any.
   */
  codecKey?: string | undefined;
}

/** A backend as the pool sees it. */
export interface BackendInfo {
  id: string;
  url: string;
  protocol: 'prorl' | 'vllm' | 'sglang';
  state: 'probing' | 'healthy' | 'degraded' | 'draining' | 'removed';
  inFlight: number;
  served: number;
  failures: number;
  weightVersion: string | number | null;
  /** Moving average of call latency. */
  latencyMs: number | null;
}

/** An {@link LlmClient} whose backends change at run time (the backend pool). */
export interface ManagedLlmClient extends LlmClient {
  addBackend(spec: BackendSpec): BackendInfo;
  /** Stops new calls to it; in-flight calls finish. */
  drainBackend(id: string): boolean;
  /** Removes it now; its in-flight calls are retried elsewhere. */
  removeBackend(id: string): boolean;
  listBackends(): BackendInfo[];
  /** Sets the weight version recorded on turns sampled from then on (all backends, or one). */
  setWeightVersion(version: string | number, backendId?: string): void;
}
