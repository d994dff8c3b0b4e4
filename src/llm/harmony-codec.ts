import type { Message, ToolSchema } from '../protocol/messages.js';
import type { ChatCodec, ParsedAssistant } from './chat-codec.js';
import type { HfChatCodec, TextTokenizer } from './hf-codec.js';
import { DEFAULT_IDENTITY, renderDeveloper, renderSampledAsHistory, renderSystem, renderTurn, type HarmonySystem } from './harmony-render.js';
import { SampledTurns } from './sampled-turns.js';
import { HARMONY, parseHarmony } from './tool-parsers/harmony.js';

/** What {@link createHarmonyCodec} takes besides the tokenizer. */
export interface HarmonyCodecOptions {
  /** `Reasoning:` in the system message; vLLM's default `medium`. */
  reasoningEffort?: HarmonySystem['reasoningEffort'] | undefined;
  /** `Current date:`; by default the day (UTC) each prompt is rendered, as vLLM does. */
  currentDate?: string | undefined;
  modelIdentity?: string | undefined;
  /** More ids that end a generation (`generation_config.json`'s `eos_token_id`). */
  extraStopIds?: readonly number[] | undefined;
  name?: string | undefined;
}

const REQUIRED = [HARMONY.start, HARMONY.end, HARMONY.message, HARMONY.channel, HARMONY.constrain, HARMONY.call, HARMONY.return];

/**
 * True for a codec whose turns keep reasoning in a channel of their own (harmony's analysis),
 * not as a `<think>` block in the content: OpenAI answers give it as `reasoning_content`.
 */
export function reasoningApart(codec: ChatCodec): boolean {
  return (codec as { format?: { toolParser?: string } }).format?.toolParser === 'openai';
}

/** True when a tokenizer.json has harmony's special tokens (gpt-oss's o200k_harmony vocabulary). */
export function isHarmonyVocab(tokenizerJson: object): boolean {
  const added = new Set(((tokenizerJson as { added_tokens?: { content?: unknown }[] }).added_tokens ?? []).map((a) => a.content));
  return REQUIRED.every((t) => added.has(t));
}

/**
 * A codec for gpt-oss: OpenAI's harmony format rendered natively (as vLLM does through the
 * `openai_harmony` library; the model's Jinja template is not used), tokenized with the model's
 * own tokenizer.
 *
 * - A generation ends at `<|call|>` (a tool call) or `<|return|>` (the answer), never at
 *   `<|end|>`, which only closes one message of several (the analysis before the answer).
 * - Append-only: after a sampled turn come the new tool / user messages and the generation
 *   prompt `<|start|>assistant`. A tool message names the call it answers
 *   (`<|start|>functions.NAME to=assistant<|channel|>commentary…`): from its `name`, else the
 *   last call of the sampled turn. A turn cut by `max_tokens` is closed with `<|end|>`.
 * - Sampled ids are kept as sampled. Where vLLM would render the turn differently when the chat
 *   comes back as history (`to=` in the role part, `json` instead of `<|constrain|>json`, an
 *   answer's `<|return|>` as `<|end|>`, the chain of thought of turns before the last answer
 *   dropped), {@link HfChatCodec.renderFull} shows it and the drift detector reports it.
 *
 * @throws Error when the tokenizer lacks one of harmony's special tokens.
 */
export function createHarmonyCodec(tok: TextTokenizer, opts: HarmonyCodecOptions = {}): HfChatCodec {
  // One codec per effort, made when first asked for, each answering for all of them.
  const variants = new Map<HarmonySystem['reasoningEffort'], HfChatCodec>();
  const withEffort = (effort: HarmonySystem['reasoningEffort']): HfChatCodec => {
    let v = variants.get(effort);
    if (!v) {
      v = buildHarmonyCodec(tok, { ...opts, reasoningEffort: effort }, withEffort);
      variants.set(effort, v);
    }
    return v;
  };
  return withEffort(opts.reasoningEffort ?? 'medium');
}

function buildHarmonyCodec(tok: TextTokenizer, opts: HarmonyCodecOptions, withEffort: (effort: HarmonySystem['reasoningEffort']) => HfChatCodec): HfChatCodec {
  const idOf = (t: string): number => {
    const id = tok.tokenToId(t);
    if (id === undefined) throw new Error(`the tokenizer has no ${t} token: not a harmony (gpt-oss) vocabulary`);
    return id;
  };
  const [endId, callId, returnId] = [idOf(HARMONY.end), idOf(HARMONY.call), idOf(HARMONY.return)];
  const stopIds = new Set<number>([returnId, callId, ...(opts.extraStopIds ?? [])]);
  const eos = tok.tokenToId('<|endoftext|>');
  if (eos !== undefined) stopIds.add(eos);
  // Sampled text that ends a message: after it the next message starts; otherwise it is closed first.
  const closers = new Set([endId, callId, returnId]);
  const system = (): HarmonySystem => ({
    reasoningEffort: opts.reasoningEffort ?? 'medium',
    currentDate: opts.currentDate ?? new Date().toISOString().slice(0, 10),
    modelIdentity: opts.modelIdentity ?? DEFAULT_IDENTITY,
  });
  const encode = (text: string): number[] => (text.length === 0 ? [] : tok.encode(text));
  const decode = (ids: number[]): string => (ids.length === 0 ? '' : tok.decode(ids));
  const genPrompt = `${HARMONY.start}assistant`;

  /** A tool message's call name: from its id's call in `history`, its `name`, else `fallback`. */
  const namer = (history: readonly Message[], fallback: () => string) => {
    const byId = new Map<string, string>();
    for (const m of history) for (const c of m.tool_calls ?? []) if (c.id) byId.set(c.id, c.name);
    return (m: Message): string => (m.tool_call_id !== undefined ? byId.get(m.tool_call_id) : undefined) ?? m.name ?? fallback();
  };

  /**
   * The conversation as pieces: text, or sampled ids spliced where vLLM's history rendering of
   * the turn is exactly the sampled text. `sampled` gives an assistant turn's ids, if known.
   */
  const pieces = (messages: readonly Message[], tools: readonly ToolSchema[], addGenerationPrompt: boolean, sampled: (m: Message) => number[] | undefined): (string | number[])[] => {
    const out: (string | number[])[] = [renderSystem(system(), tools.length > 0)];
    let rest = messages;
    let instructions: string | null = null;
    if (rest[0]?.role === 'system') {
      instructions = rest[0].content;
      rest = rest.slice(1);
    }
    const dev = renderDeveloper(instructions, tools);
    if (dev) out.push(dev);
    // Harmony drops the chain of thought of the turns before the last final answer.
    let lastFinal = -1;
    rest.forEach((m, i) => {
      if (m.role === 'assistant' && (m.tool_calls ?? []).length === 0) lastFinal = i;
    });
    let lastCall = '';
    const nameOf = namer(rest, () => lastCall);
    rest.forEach((m, i) => {
      const ids = m.role === 'assistant' ? sampled(m) : undefined;
      if (ids && ids.length > 0) {
        const text = decode(ids);
        const canonical = renderSampledAsHistory(text, i < lastFinal);
        if (canonical === genPrompt + text) out.push(genPrompt, ids);
        else out.push(canonical);
      } else out.push(renderTurn(m, nameOf));
      const calls = m.tool_calls ?? [];
      if (calls.length > 0) lastCall = calls.at(-1)!.name;
    });
    if (addGenerationPrompt) out.push(genPrompt);
    return out;
  };

  const renderText = (messages: Message[], tools: ToolSchema[], o: { addGenerationPrompt: boolean }): string =>
    pieces(messages, tools, o.addGenerationPrompt, () => undefined)
      .map((p) => (typeof p === 'string' ? p : decode(p)))
      .join('');

  // For the drift check over messages without `token_ids`.
  const sampledTurns = new SampledTurns();

  return {
    name: opts.name ?? 'harmony',
    endOfTurnId: returnId,
    stopIds,
    vocabSize: tok.vocabSize,
    format: Object.freeze({ toolParser: 'openai', reasoning: null }),
    rendersTools: true,
    renderText,
    encode,
    decode,
    encodePrompt(messages, tools) {
      return encode(renderText(messages, tools, { addGenerationPrompt: true }));
    },
    encodeContinuation(newMessages, lastOutputIds) {
      const last = lastOutputIds.at(-1);
      const closed = last === undefined || closers.has(last);
      // Parsed only for a tool message that names no call, and then once.
      let lastCall: string | undefined;
      const nameOf = namer([], () => (lastCall ??= parseHarmony(decode(lastOutputIds)).toolCalls.at(-1)?.name ?? ''));
      const text = newMessages.map((m) => renderTurn(m, nameOf)).join('');
      return encode((closed ? '' : HARMONY.end) + text + genPrompt);
    },
    parseAssistant(outputIds): ParsedAssistant {
      const p = parseHarmony(decode(outputIds));
      const out: ParsedAssistant = { content: p.content, toolCalls: p.toolCalls, malformed: p.malformed };
      if (p.reasoning !== null) out.reasoning = p.reasoning;
      sampledTurns.remember(out.content, out.toolCalls, outputIds);
      return out;
    },
    encodeAssistant(turn) {
      // As gpt-oss writes a turn after `<|start|>assistant`: the reasoning, a preamble when it
      // calls tools, then each call (`<|call|>`), or the answer (`<|return|>`).
      const parts: string[] = [];
      const reasoning = turn.reasoning;
      if (reasoning) parts.push(`${HARMONY.channel}analysis${HARMONY.message}${reasoning}${HARMONY.end}`);
      const calls = turn.tool_calls ?? [];
      if (calls.length === 0) parts.push(`${HARMONY.channel}final${HARMONY.message}${turn.content ?? ''}${HARMONY.return}`);
      else {
        if (turn.content) parts.push(`${HARMONY.channel}commentary${HARMONY.message}${turn.content}${HARMONY.end}`);
        for (const c of calls) parts.push(`${HARMONY.channel}commentary to=functions.${c.name} ${HARMONY.constrain}json${HARMONY.message}${JSON.stringify(c.arguments)}${HARMONY.call}`);
      }
      return encode(parts.join(genPrompt));
    },
    withReasoningEffort: withEffort,
    renderFull(messages, tools) {
      return pieces(messages, tools, true, (m) => sampledTurns.idsOf(m)).flatMap((p) => (typeof p === 'string' ? encode(p) : p));
    },
  };
}
