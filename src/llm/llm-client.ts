import type { Instance, SamplingParams } from '../protocol/instance.js';
import type { Message, ToolSchema } from '../protocol/messages.js';
import type { ChatCodec } from './chat-codec.js';

/** The wire protocols a backend can speak. */
export type BackendProtocol = 'prorl' | 'vllm' | 'sglang' | 'openai';

/**
 * The conversation behind a prompt, for chat-completions backends (`openai`) that take messages
 * rather than ids. Token protocols ignore it. The trajectory builder is one (a live view: it does
 * not change while a call is in flight).
 */
export interface ChatContext {
  readonly messages: readonly Message[];
  readonly tools: readonly ToolSchema[];
  /** The rollout's codec: re-tokenizes a reply when the server returns no token ids. */
  readonly codec: ChatCodec;
}

/**
 * What a turn's logprobs mean: `raw` (the model's distribution before temperature / top-p:
 * vLLM V1's default), `processed` (after them: SGLang's default), `none` (the backend gave no
 * logprobs; the turn's are 0 and a trainer must recompute them), `unknown` (not stated).
 */
export type LogprobSemantics = 'raw' | 'processed' | 'none' | 'unknown';

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
  /** The conversation, for chat-completions backends; the prompt ids stay the trajectory's tokens. */
  chat?: ChatContext | undefined;
}

/** One generation result, token-out. */
export interface GenerateResult {
  outputIds: number[];
  /** One logprob per output id. */
  logprobs: number[];
  backendId: string;
  weightVersion: string | number | null;
  finishReason: 'stop' | 'length' | 'abort';
  /** `engine`: the ids and logprobs are the server's; `retokenized`: the reply's text was tokenized locally. Absent means `engine`. */
  tokenSource?: 'engine' | 'retokenized' | undefined;
  /** What the logprobs mean (see {@link LogprobSemantics}); absent means `unknown`. */
  logprobSemantics?: LogprobSemantics | undefined;
  /** The prompt ids the server reports it saw (chat backends render their own template), for a drift check. */
  enginePromptIds?: number[] | undefined;
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
  /** `http://host:port[/path]` (or https). For `openai`, the base URL ending in `/v1`. */
  url: string;
  protocol: BackendProtocol;
  /** Model name for OpenAI-style routes (vLLM, openai). */
  model?: string | undefined;
  weightVersion?: string | number | null | undefined;
  /** What the server's logprobs mean when it is not the protocol's default (e.g. vLLM with `--logprobs-mode processed_logprobs`). */
  logprobSemantics?: 'raw' | 'processed' | undefined;
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
  protocol: BackendProtocol;
  state: 'probing' | 'healthy' | 'degraded' | 'draining' | 'removed';
  inFlight: number;
  served: number;
  failures: number;
  weightVersion: string | number | null;
  /** Moving average of call latency. */
  latencyMs: number | null;
  /** What this backend's logprobs mean, once known (from the protocol or its answers). */
  logprobSemantics?: LogprobSemantics | undefined;
}

/** An {@link LlmClient} whose backends change at run time (the backend pool). */
export interface ManagedLlmClient extends LlmClient {
  addBackend(spec: BackendSpec): BackendInfo;
  /** Stops new calls to it; in-flight calls finish. */
  drainBackend(id: string): boolean;
  /** Removes it now; its in-flight calls are retried elsewhere. */
  removeBackend(id: string): boolean;
  listBackends(): BackendInfo[];
  /** Sets the weight version stamped on calls sent from then on (all backends, or one); a call in flight keeps the version it was sent at. */
  setWeightVersion(version: string | number, backendId?: string): void;
}
