import type { IntegrityDefaults } from '../protocol/integrity.js';
/**
 * The handler contract: what the runtime asks of a task family ({@link AgentHandler}) and of an
 * agent it does not drive ({@link ExternalAgent}), with their context types. It lives here, in
 * the lowest layer whose types it names (an external agent's chat request is the proxy's
 * {@link ProxyChatCall}; a handler's sandbox is the sandbox layer's), so that runtime, handlers
 * and proxy all import it downward (the layer order is in the README's architecture section).
 */
import type { Instance, SamplingParams } from '../protocol/instance.js';
import type { Message, ToolCall, ToolSchema } from '../protocol/messages.js';
import type { Sandbox, SandboxSpec } from '../sandbox/sandbox.js';
import type { FinishReason } from '../protocol/trajectory.js';
import type { Clock } from '../clock.js';
import type { ProxyChatCall } from './llm-proxy.js';

/** What every handler hook receives. */
export interface HandlerContext {
  rolloutId: string;
  instance: Instance;
  sampling: SamplingParams;
  /** Aborted on cancel, timeout and stale; pass it to every sandbox call. */
  signal: AbortSignal;
  /** The runtime's clock: measure and wait with it, never with `Date.now` or `performance.now`. */
  clock: Clock;
  /**
   * Starts a sandbox owned by this rollout. The runtime closes every sandbox made here when the
   * rollout ends, on every path; a handler never has to (and may, early).
   */
  createSandbox(spec: SandboxSpec): Promise<Sandbox>;
}

export interface InitResult {
  /** The first messages (system, user). */
  messages: Message[];
  /** The tools offered to the model. */
  tools: ToolSchema[];
  /** The sandbox the agent acts in, if any (made with `ctx.createSandbox`). */
  sandbox?: Sandbox | undefined;
  /** Handler state carried to `act` and `eval`. */
  state?: unknown;
  /**
   * An agent that runs on its own and asks for the model through the rollout's LLM proxy (the
   * `harness` family): the runtime's loop then answers its chat requests instead of calling
   * `act` (see docs/proxy.md). `messages` and `tools` are ignored: the agent sends its own.
   */
  external?: ExternalAgent | undefined;
}

/** What an {@link ExternalAgent} does next: ask for the model, or end. */
export type ExternalAgentEvent = { type: 'chat'; call: ProxyChatCall } | { type: 'exit'; exitCode: number | null };

/**
 * An agent program the runtime does not drive (a harness): it calls the model through the
 * rollout's proxy when it wants, and exits when it is done.
 */
export interface ExternalAgent {
  /** Its limits: chat requests and trajectory tokens at most (undefined: only the runtime's own). */
  readonly limits: { maxLlmCalls?: number | undefined; maxTokensTotal?: number | undefined };
  /** Resolves with its next chat request or its exit. Rejects with the signal's reason on abort. */
  next(signal: AbortSignal): Promise<ExternalAgentEvent>;
  /** Ends it: later chat requests are refused (410) and its process tree is killed. Idempotent; never throws. */
  stop(reason: string): Promise<void>;
}

/** One tool's outcome, as the agent loop turns it into a `tool` message. */
export interface Observation {
  callId: string;
  name: string;
  /** What the model reads. */
  content: string;
  exitCode?: number | null | undefined;
  /** The call failed: bad arguments, refused edit, unknown tool, timeout. */
  error?: boolean | undefined;
  /** The failure is the policy's own (malformed call): trainable, not an infra fault. */
  policyError?: boolean | undefined;
  latencyMs?: number | undefined;
}

export interface ActContext extends HandlerContext {
  sandbox: Sandbox | undefined;
  state: unknown;
  /** 0-based index of the assistant turn being acted on. */
  turn: number;
  /** The assistant message just sampled, with its parsed tool calls. */
  assistant: Message & { tool_calls: ToolCall[] };
  /** Malformed tool-call blocks of that turn. */
  malformed: { raw: string; error: string }[];
  /** Called as each tool call starts and ends, for the event stream. */
  onToolCall?(call: { callId: string; name: string; arguments: Record<string, unknown> }): void;
  onToolResult?(obs: Observation): void;
}

export interface ActResult {
  /** New messages for the model (usually one `tool` message per call). */
  messages: Message[];
  observations: Observation[];
  /** Set to stop the loop: the finish tool, or a turn with no tool call. Null to continue. */
  stop: Extract<FinishReason, 'finish_tool' | 'no_tool_call'> | null;
  state?: unknown;
}

export interface EvalContext extends HandlerContext {
  /** The run's sandbox, still open. */
  sandbox: Sandbox | undefined;
  state: unknown;
  messages: Message[];
  finish: FinishReason;
}

export interface EvalResult {
  reward: number;
  resolved: boolean;
  details?: Record<string, unknown> | undefined;
}

/**
 * A task family. `init` makes the sandbox and first messages; `act` runs one assistant turn's tool
 * calls (most handlers use the shared tool agent's `act`); `eval` scores the result.
 *
 * Throw TaskError for bad instance data (not retried), SandboxError / InfraError for
 * infrastructure faults (retried). Anything else thrown counts as an infra fault.
 */
export interface AgentHandler {
  /** The `data_source` it serves. */
  readonly name: string;
  /** Other `data_source` values routed here (e.g. `deepscaler` → math). */
  readonly aliases?: readonly string[];
  /** `data_source` prefixes routed here when no name or alias matches (e.g. `deepcoder` → `deepcoder_lcb`). */
  readonly prefixes?: readonly string[];
  init(ctx: HandlerContext): Promise<InitResult>;
  act(ctx: ActContext): Promise<ActResult>;
  eval(ctx: EvalContext): Promise<EvalResult>;
  /**
   * The family's default integrity policy for `instance` (#27; docs/integrity.md), or null.
   * Pure and never throws: a row it cannot read gets null (its init refuses it anyway).
   */
  integrityDefaults?(instance: Record<string, unknown>): IntegrityDefaults | null;
}
