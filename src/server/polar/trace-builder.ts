import type { Message } from '../../protocol/messages.js';
import type { Trajectory } from '../../protocol/trajectory.js';
import type { BuilderName, Trace } from './polar-models.js';

/** One LLM call of a session, as the builders read it. */
export interface LlmCall {
  /** Position among the session's calls (its turn index). */
  turn: number;
  promptIds: readonly number[];
  responseIds: readonly number[];
  /** One per response id. */
  logprobs: readonly number[];
  /** OpenAI's vocabulary: `stop`, `tool_calls`, `length`, `abort`. */
  finishReason: string;
  promptMessages: readonly Record<string, unknown>[];
  responseMessages: readonly Record<string, unknown>[];
  weightVersion: string | number | null;
  backendId: string;
}

/** A trace before the evaluator's reward is set on it. */
export type UnrewardedTrace = Omit<Trace, 'reward' | 'reward_components'>;

/** Options of {@link buildTraces}. */
export interface BuildOptions {
  /** `prefix_merging`'s end-of-turn token id (`builder.config.end_of_turn_token_id`); detected when absent. */
  endOfTurnTokenId?: number | undefined;
  tools?: Record<string, unknown>[] | null | undefined;
}

/** Finish reasons where the model emitted its end-of-turn token itself. */
const NATURAL_STOP = new Set(['stop', 'tool_calls', 'stop_sequence']);

/**
 * Builds Polar traces from a session's LLM calls (in time order). A pure function.
 *
 * - `per_request`: one trace per call — its prompt, its sampled ids (mask 1) and logprobs.
 * - `prefix_merging` (Polar's `trajectory/builder/prefix_merging.py`): each call joins the chain
 *   whose last prompt is a token prefix of its own prompt (the longest such tip wins), else it
 *   starts a chain. A chain is one trace: the first call's prompt, then each call's sampled ids
 *   (mask 1, their logprobs) with the tokens between them (tool results, template glue: mask
 *   0, logprob 0) taken from the next call's prompt. The glue is what follows the previous
 *   prompt + sampled ids when the next prompt extends exactly those (our token-in/token-out
 *   path always does); otherwise what follows the first end-of-turn token in the next prompt's
 *   new tail, as Polar splits it. Where neither holds, the prefix is broken and the call starts
 *   a new trace (Polar truncates the chain there; we keep the rest as its own trace).
 */
export function buildTraces(calls: readonly LlmCall[], builder: BuilderName, opts: BuildOptions = {}): UnrewardedTrace[] {
  const tools = opts.tools && opts.tools.length > 0 ? opts.tools : null;
  if (builder === 'per_request') return calls.map((c) => singleTrace(c, tools));
  const chains: LlmCall[][] = [];
  const tips: (readonly number[])[] = [];
  for (const c of calls) {
    let best = -1;
    let bestLen = -1;
    tips.forEach((tip, i) => {
      if (tip.length > bestLen && tip.length > 0 && startsWith(c.promptIds, tip)) {
        best = i;
        bestLen = tip.length;
      }
    });
    if (best < 0) {
      best = chains.length;
      chains.push([]);
      tips.push([]);
    }
    chains[best]!.push(c);
    tips[best] = c.promptIds;
  }
  const eot = opts.endOfTurnTokenId;
  const out: UnrewardedTrace[] = [];
  for (const chain of chains) out.push(...mergeChain(chain, eot ?? detectEot(chain), tools));
  return out;
}

function singleTrace(c: LlmCall, tools: Record<string, unknown>[] | null): UnrewardedTrace {
  return {
    prompt_ids: c.promptIds.slice(),
    response_ids: c.responseIds.slice(),
    loss_mask: c.responseIds.map(() => 1 as const),
    response_logprobs: c.logprobs.length === c.responseIds.length ? c.logprobs.slice() : null,
    prompt_messages: c.promptMessages.map((m) => ({ ...m })),
    response_messages: c.responseMessages.map((m) => ({ ...m })),
    tools,
    finish_reason: c.finishReason,
    metadata: { builder: 'per_request', turns: [c.turn], weight_versions: [{ turn: c.turn, version: c.weightVersion, tokens: c.responseIds.length }], backend_ids: [c.backendId] },
  };
}

/** Merges one chain; a break in the prefix closes the trace and the rest continues as another. */
function mergeChain(chain: readonly LlmCall[], eot: number | undefined, tools: Record<string, unknown>[] | null): UnrewardedTrace[] {
  const traces: UnrewardedTrace[] = [];
  let i = 0;
  while (i < chain.length) {
    const first = chain[i]!;
    const response: number[] = first.responseIds.slice();
    const mask: (0 | 1)[] = first.responseIds.map(() => 1 as const);
    const logprobs: number[] = first.logprobs.slice();
    let logprobsOk = first.logprobs.length === first.responseIds.length;
    const responseMessages = first.responseMessages.map((m) => ({ ...m }));
    let msgAcc = first.promptMessages.length + first.responseMessages.length;
    const turns = [first.turn];
    const versions = [{ turn: first.turn, version: first.weightVersion, tokens: first.responseIds.length }];
    const backends = [first.backendId];
    let prev = first;
    let last = first;
    let j = i + 1;
    for (; j < chain.length; j++) {
      const c = chain[j]!;
      if (!startsWith(c.promptIds, prev.promptIds)) break;
      const glue = interstitial(c.promptIds.slice(prev.promptIds.length), prev.responseIds, eot);
      if (glue === null) break;
      for (const t of glue) {
        response.push(t);
        mask.push(0);
        logprobs.push(0);
      }
      if (c.promptMessages.length > msgAcc) {
        for (const m of c.promptMessages.slice(msgAcc)) responseMessages.push({ ...m });
        msgAcc = c.promptMessages.length;
      }
      for (const t of c.responseIds) {
        response.push(t);
        mask.push(1);
      }
      logprobs.push(...c.logprobs);
      logprobsOk &&= c.logprobs.length === c.responseIds.length;
      for (const m of c.responseMessages) responseMessages.push({ ...m });
      msgAcc += c.responseMessages.length;
      turns.push(c.turn);
      versions.push({ turn: c.turn, version: c.weightVersion, tokens: c.responseIds.length });
      backends.push(c.backendId);
      prev = c;
      last = c;
    }
    traces.push({
      prompt_ids: first.promptIds.slice(),
      response_ids: response,
      loss_mask: mask,
      response_logprobs: logprobsOk ? logprobs : null,
      prompt_messages: first.promptMessages.map((m) => ({ ...m })),
      response_messages: responseMessages,
      tools,
      finish_reason: last.finishReason,
      metadata: { builder: 'prefix_merging', turns, weight_versions: versions, backend_ids: [...new Set(backends)], prefix_broken: j < chain.length },
    });
    i = j;
  }
  return traces;
}

/**
 * The tokens between the previous call's sampled ids and this call's, from `tail` (this prompt
 * past the previous prompt), or null when they cannot be told apart (a broken prefix).
 */
export function interstitial(tail: readonly number[], prevResponse: readonly number[], eot: number | undefined): number[] | null {
  if (startsWith(tail, prevResponse)) return tail.slice(prevResponse.length);
  if (eot === undefined) return null;
  const k = tail.indexOf(eot);
  if (k < 0) return null;
  return prevResponse.length > 0 && prevResponse[prevResponse.length - 1] === eot ? tail.slice(k + 1) : tail.slice(k);
}

/** The last sampled token of the chain's first natural stop (Polar's auto-detection). */
function detectEot(chain: readonly LlmCall[]): number | undefined {
  for (const c of chain) if (NATURAL_STOP.has(c.finishReason) && c.responseIds.length > 0) return c.responseIds[c.responseIds.length - 1];
  return undefined;
}

function startsWith(a: readonly number[], prefix: readonly number[]): boolean {
  if (prefix.length > a.length) return false;
  for (let i = 0; i < prefix.length; i++) if (a[i] !== prefix[i]) return false;
  return true;
}

/** A chat message in OpenAI's shape (tool-call arguments as JSON text), without our token fields. */
export function openAiMessage(m: Message): Record<string, unknown> {
  const out: Record<string, unknown> = { role: m.role, content: m.content };
  if (m.tool_calls) {
    out['tool_calls'] = m.tool_calls.map((c, i) => ({ id: c.id ?? `call_${i}`, type: 'function', function: { name: c.name, arguments: JSON.stringify(c.arguments ?? {}) } }));
  }
  if (m.tool_call_id !== undefined) out['tool_call_id'] = m.tool_call_id;
  if (m.name !== undefined) out['name'] = m.name;
  return out;
}

/**
 * The session's LLM calls from a rollout trajectory: turn i is the i-th assistant message of its
 * segment (the whole conversation when the record is one sequence); its prompt messages are the
 * segment's messages before it. Where the messages do not line up with the turns (a turn whose
 * answer was not kept as a message), the calls carry no messages rather than wrong ones.
 */
export function callsOf(t: Trajectory): LlmCall[] {
  const segments = t.segments ?? [{ turnStart: 0, turnEnd: t.turns.length, messageStart: 0, messageEnd: t.messages.length }];
  const calls: LlmCall[] = [];
  for (const seg of segments) {
    const msgs = t.messages.slice(seg.messageStart, seg.messageEnd);
    const assistantAt: number[] = [];
    msgs.forEach((m, i) => {
      if (m.role === 'assistant') assistantAt.push(i);
    });
    const aligned = assistantAt.length >= seg.turnEnd - seg.turnStart;
    for (let k = seg.turnStart; k < seg.turnEnd; k++) {
      const turn = t.turns[k]!;
      const at = aligned ? assistantAt[k - seg.turnStart]! : -1;
      const answer = at >= 0 ? msgs[at]! : null;
      const finish = turn.finishReason === 'stop' && answer?.tool_calls?.length ? 'tool_calls' : turn.finishReason;
      calls.push({
        turn: k,
        promptIds: turn.promptIds,
        responseIds: turn.outputIds,
        logprobs: turn.logprobs,
        finishReason: finish,
        promptMessages: at >= 0 ? msgs.slice(0, at).map(openAiMessage) : [],
        responseMessages: answer ? [openAiMessage(answer)] : [],
        weightVersion: turn.weightVersion,
        backendId: turn.backendId,
      });
    }
  }
  return calls;
}
