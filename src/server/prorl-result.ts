import type { Message } from '../protocol/messages.js';
import type { RolloutResult } from '../protocol/trajectory.js';
import type { ProcessResponse, ProrlFinishReason, ProrlMessage } from '../protocol/http.js';
import { redactHostPaths } from './redact.js';

/** What the route knows about the request beside the result. */
export interface ProrlResultContext {
  /** The client's `job_id` label (the rollout id when the client gave none). */
  jobId?: string | undefined;
  /** `instance.trajectory_id` exactly as the client sent it (3 stays 3, "3" stays "3"). */
  trajectoryId?: unknown;
}

/** Data sources of the SWE family: their results always carry `git_patch` (a string). */
const SWE_SOURCES = new Set(['swe', 'swebench']);

const REASONS: ReadonlySet<string> = new Set<ProrlFinishReason>(['finish_tool', 'no_tool_call', 'max_iterations', 'context_full', 'length', 'timeout', 'cancelled', 'error']);

/**
 * Maps a rollout result onto the ProRL `/process` answer (REFERENCE.md §1, §5).
 *
 * The guarantee trainers rely on: only `completed` and `truncated` rollouts have `filter: false`.
 * Every other outcome is filtered, and every failure that is not the policy's own sets
 * `critical_error`, so an infrastructure fault never looks like a trainable `resolved: false`:
 * - `infra-error` → `critical_error` = the failing stage (`run` when unknown);
 * - `timed-out` → `critical_error: 'timeout'`;
 * - `task-error` → `critical_error` = its stage (default `init`: bad instance data is found there);
 * - `cancelled` → `critical_error: null`, `filter: true` (the client asked for it).
 *
 * The shape is the reference's, as its clients read it: `finish` is a bool (the finish tool
 * ended the run) and our reason is `finish_reason`; `end_properly` is true when the agent
 * stopped on its own (finish tool or a turn without a tool call) and the rollout completed;
 * `git_patch` is a string on SWE data sources and absent elsewhere; tool-call `arguments` are
 * JSON strings, and calls carry no `id` and tool messages no `tool_call_id`, as the reference
 * writes them (#28: NeMo Gym pairs tool outputs with calls by its own numbering and uses any id
 * it is given); every message carries `token_ids` (the first prompt's ids on the last message
 * before the first assistant turn and `[]` on the ones before it, a continuation's on its last
 * message — concatenated in order they are the trajectory's tokens up to the last assistant
 * turn); the messages are always trimmed to end with the last assistant message, or `[]` when
 * the policy never spoke (the reference does so whatever stopped the loop: an iteration cap
 * leaves no trailing tool message, a zero-turn `context_full` no bare prompt). Error messages
 * have host paths replaced with `<host>`.
 */
export function toProrlResult(r: RolloutResult, ctx: ProrlResultContext = {}): ProcessResponse {
  let critical: ProcessResponse['critical_error'] = null;
  switch (r.outcome) {
    case 'infra-error':
      // An infra error without a stage happened outside the three stages (admission, the
      // supervisor itself); `run` is where a trainer looks for "the rollout broke".
      critical = r.error?.stage ?? 'run';
      break;
    case 'task-error':
      critical = r.error?.stage ?? 'init';
      break;
    case 'timed-out':
      critical = 'timeout';
      break;
    default:
      critical = null;
  }
  const trainable = r.outcome === 'completed' || r.outcome === 'truncated';
  const t = r.timing;
  const inStages = t.initMs + t.runMs + t.evalMs;
  const reason = finishReason(r);
  const patch = r.evalDetails?.['git_patch'] ?? r.evalDetails?.['gitPatch'] ?? r.evalDetails?.['patch'];
  const swe = SWE_SOURCES.has(r.dataSource) || typeof patch === 'string';
  const tid = ctx.trajectoryId;
  const out: ProcessResponse = {
    job_id: ctx.jobId ?? r.id,
    rollout_id: r.id,
    messages: prorlMessages(r.trajectory.messages),
    tools: r.trajectory.tools,
    resolved: trainable ? r.resolved : false,
    reward: r.reward,
    critical_error: critical,
    filter: !trainable,
    finish: reason === 'finish_tool',
    finish_reason: reason,
    end_properly: r.outcome === 'completed' && (reason === 'finish_tool' || reason === 'no_tool_call'),
    success: trainable,
    error: r.error ? redactHostPaths(`${r.error.name}: ${r.error.message}`) : null,
    instance_id: r.instanceId,
    trajectory_id: typeof tid === 'string' || typeof tid === 'number' ? tid : r.trajectoryId,
    timing: {
      init_time: t.initMs / 1000,
      run_time: t.runMs / 1000,
      eval_time: t.evalMs / 1000,
      // Time outside the three stages (queueing, retries' back-off, hand-offs), as ProRL reports it.
      others_time: Math.max(0, t.wallMs - inStages) / 1000,
      counted_elapsed: t.countedMs / 1000,
      timeout_triggered: t.timeoutTriggered,
    },
    outcome: r.outcome,
    attempts: r.attempts,
  };
  if (swe) out.git_patch = typeof patch === 'string' ? patch : '';
  if (r.integrity) out.metadata = { integrity: r.integrity };
  return out;
}

/** Our finish reason in the reference's vocabulary, from the outcome when the loop gave none. */
export function finishReason(r: RolloutResult): ProrlFinishReason {
  const f = r.finish as string | null;
  const turns = r.trajectory.turns;
  // A last turn cut by the token limit that left no tool call is a length stop, not the policy's choice.
  if (f === 'no_tool_call' && turns.length > 0 && turns[turns.length - 1]!.finishReason === 'length') return 'length';
  if (f !== null && REASONS.has(f)) return f as ProrlFinishReason;
  // Ended by the trainer's token-age bound (`staleTokens: finish`): like an iteration cap, the
  // service stopped a loop the agent had not ended, and it was still evaluated.
  if (f === 'stale_tokens') return 'max_iterations';
  switch (r.outcome) {
    case 'timed-out':
      return 'timeout';
    case 'cancelled':
      return 'cancelled';
    default:
      return 'error';
  }
}

/**
 * The messages as the reference returns them (see {@link toProrlResult}). Never mutates the
 * result's own messages.
 */
export function prorlMessages(messages: readonly Message[]): ProrlMessage[] {
  // The reference hands back the conversation up to what the policy said last: the tool / user
  // messages after the last assistant turn go, and everything when the policy never spoke.
  let end = messages.length;
  while (end > 0 && messages[end - 1]!.role !== 'assistant') end--;
  const out: ProrlMessage[] = new Array(end);
  const firstAssistant = messages.findIndex((m) => m.role === 'assistant');
  for (let i = 0; i < end; i++) {
    const m = messages[i]!;
    const pm = Object.assign({}, m) as unknown as ProrlMessage & Record<string, unknown>;
    if (m.tool_calls) pm.tool_calls = m.tool_calls.map((c) => ({ name: c.name, arguments: JSON.stringify(c.arguments ?? {}) }));
    // The reference's tool messages name no call: its clients pair outputs with calls by position.
    delete pm.tool_call_id;
    if (pm.token_ids === undefined) {
      // The first prompt is templated as one piece: its ids go on its last message.
      const first = messages[firstAssistant];
      pm.token_ids = i === firstAssistant - 1 && first?.input_ids ? first.input_ids : [];
    }
    out[i] = pm;
  }
  return out;
}
