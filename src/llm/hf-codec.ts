import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';
import type { Message, ToolCall, ToolSchema } from '../protocol/messages.js';
import type { ChatCodec, ParsedAssistant } from './chat-codec.js';
import { SampledTurns } from './sampled-turns.js';
import { parseToolCalls, type AssistantFormat } from './tool-call-parser.js';
import { detectReasoning, detectToolParser, getToolParser } from './tool-parsers/index.js';

/** What {@link createHfCodec} needs: the two files of a Hugging Face tokenizer. */
export interface HfCodecOptions {
  /** Parsed `tokenizer.json`. */
  tokenizerJson: object;
  /** Parsed `tokenizer_config.json`; its `chat_template` is used unless `chatTemplate` is given. */
  tokenizerConfig: object;
  /** Overrides the config's chat template. */
  chatTemplate?: string | undefined;
  /**
   * The end-of-turn token; by default the special token the template writes right after an
   * assistant turn, else the config's `eos_token`.
   */
  endOfTurnToken?: string | undefined;
  /** More ids that end a generation (`generation_config.json`'s `eos_token_id`). */
  extraStopIds?: readonly number[] | undefined;
  /**
   * Tool-call format by name (`hermes`, `qwen3_coder`, `llama3_json`, `mistral`,
   * `deepseek_v3`; `openai` is harmony's, for which see harmony-codec.ts); by default the one the template writes, else `hermes` with a warning.
   */
  toolParser?: string | undefined;
  /** Where the template came from, for error messages (`/models/x/tokenizer_config.json`). */
  templateSource?: string | undefined;
  /** Receives one-line warnings (the tool-parser fallback); default: stderr. */
  onWarning?: ((message: string) => void) | undefined;
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
  /** The tool-call and reasoning formats `parseAssistant` reads. */
  readonly format: Readonly<AssistantFormat>;
  /** Whether the chat template writes the tool schemas into the prompt. */
  readonly rendersTools: boolean;
  /**
   * Renders the conversation with the chat template, as text (no tokenization).
   * @throws Error when the template throws (e.g. a role it does not know).
   */
  renderText(messages: Message[], tools: ToolSchema[], opts: { addGenerationPrompt: boolean; enableThinking?: boolean | undefined }): string;
  withReasoningEffort?(effort: 'low' | 'medium' | 'high'): HfChatCodec;
}

/** What a codec needs of a tokenizer: text ↔ ids without a template, and the vocabulary. */
export interface TextTokenizer {
  /** Ids of `text`, special tokens written in it split out, no BOS/EOS added. */
  encode(text: string): number[];
  /** Text of `ids`, special tokens included. */
  decode(ids: number[]): string;
  /** Id of one token (added tokens included), or undefined. */
  tokenToId(token: string): number | undefined;
  /** Number of ids, added tokens included. */
  readonly vocabSize: number;
}

/**
 * Loads a tokenizer.json with the official `@huggingface/tokenizers` (chosen over
 * `@lenml/tokenizers`: same ids on every family's samples, typed API, kept by Hugging Face;
 * see the README's dependency table).
 * @throws Error when the tokenizer.json uses a model or component the library lacks.
 */
export function loadTokenizer(tokenizerJson: object, tokenizerConfig: object): TextTokenizer {
  const t = new Tokenizer(tokenizerJson as never, tokenizerConfig as never);
  let size = 0;
  for (const id of t.get_vocab(true).values()) if (id + 1 > size) size = id + 1;
  return {
    encode: (text) => t.encode(text, { add_special_tokens: false }).ids,
    decode: (ids) => t.decode(ids, { skip_special_tokens: false }),
    tokenToId: (token) => t.token_to_id(token),
    vocabSize: size,
  };
}

// Sentinel texts for the boundary renders; control characters no real turn contains.
const U = '\u0001u';
const A = '\u0001a';
const U2 = '\u0001v';

/**
 * A {@link ChatCodec} for any Hugging Face tokenizer.json + Jinja chat template, rendered with
 * `@huggingface/jinja`, tokenized with `@huggingface/tokenizers` ({@link loadTokenizer}).
 *
 * Append-only: {@link ChatCodec.encodeContinuation} renders the new messages after a sentinel
 * assistant turn and keeps only what the template adds after it, so the ids are exactly the ones
 * a full render would put there; special tokens split the text before BPE, so tokenizing that
 * suffix alone gives the same ids as tokenizing it inside the whole conversation.
 *
 * @throws Error when the config has no chat template or the end-of-turn token is not in the vocabulary.
 */
export function createHfCodec(opts: HfCodecOptions): HfChatCodec {
  // Fail before the (slow) tokenizer load when the template is missing or does not parse.
  compileTemplate(opts);
  const tok = loadTokenizer(opts.tokenizerJson, opts.tokenizerConfig);
  return buildCodec(tok, opts);
}

/** @internal Builds the codec around an already loaded tokenizer (the Qwen3 codec shares one). */
export function buildCodec(tok: TextTokenizer, opts: HfCodecOptions): HfChatCodec {
  if (opts.toolParser !== undefined) getToolParser(opts.toolParser);
  const cfg = opts.tokenizerConfig as Record<string, unknown>;
  const { template, source, where } = compileTemplate(opts);
  const tokenText = (t: unknown): string | undefined => (typeof t === 'string' ? t : t && typeof t === 'object' && 'content' in t ? String((t as { content: unknown }).content) : undefined);
  const bos = tokenText(cfg.bos_token) ?? '';
  const idOf = (t: string): number | undefined => tok.tokenToId(t) ?? singleId(tok, t);
  const specials = specialTokens(opts.tokenizerJson);
  // Tool calls as most templates read them (object arguments, content ''), unless the template
  // shows them only with arguments as JSON text and content null (DeepSeek-V3): found by a probe.
  let callShape: CallShape = { argsAsText: false, nullContent: false };
  const baseCtx = (messages: Message[], addGenerationPrompt: boolean): Record<string, unknown> => ({
    messages: messages.map((m) => toTemplateMessage(m, callShape)),
    add_generation_prompt: addGenerationPrompt,
    bos_token: bos,
    eos_token: tokenText(cfg.eos_token) ?? '',
  });
  const tryRender = (ctx: Record<string, unknown>): string => {
    try {
      return template.render(ctx);
    } catch (e) {
      throw new Error(`chat template (${where}) fails to render: ${(e as Error).message}`, { cause: e });
    }
  };
  // The template must render the plainest conversation; a feature our Jinja lacks fails here, at load.
  tryRender(baseCtx([{ role: 'user', content: U }], true));
  const eot = opts.endOfTurnToken ?? detectEndOfTurn(tryRender(baseCtx([{ role: 'user', content: U }, { role: 'assistant', content: A }, { role: 'user', content: U2 }], false)), specials) ?? tokenText(cfg.eos_token);
  if (!eot) throw new Error(`no end-of-turn token: the chat template (${where}) writes no special token after an assistant turn and the config has no eos_token`);
  const eotId = idOf(eot);
  if (eotId === undefined) throw new Error(`end-of-turn token ${eot} is not in the vocabulary`);
  const stopIds = new Set<number>([eotId, ...(opts.extraStopIds ?? [])]);
  for (const k of ['eos_token', 'pad_token']) {
    const t = tokenText(cfg[k]);
    const id = t ? idOf(t) : undefined;
    if (id !== undefined) stopIds.add(id);
  }
  const probeCall = { name: 'probe_fn_q7', arguments: { probe_arg_q7: 1 } };
  const probeTurn = (): string => {
    try {
      return template.render(baseCtx([{ role: 'user', content: U }, { role: 'assistant', content: '', tool_calls: [probeCall] }, { role: 'user', content: U2 }], false));
    } catch {
      return '';
    }
  };
  const shapes: CallShape[] = [callShape, { argsAsText: false, nullContent: true }, { argsAsText: true, nullContent: false }, { argsAsText: true, nullContent: true }];
  callShape = shapes.find((sh) => ((callShape = sh), probeTurn().includes('probe_arg_q7'))) ?? shapes[0]!;
  let rendersTools = false;
  try {
    rendersTools = template.render({ ...baseCtx([{ role: 'user', content: U }], true), tools: [PROBE_TOOL] }).includes(PROBE_TOOL.function.name);
  } catch {
    rendersTools = false;
  }
  const warn = opts.onWarning ?? ((m: string) => process.stderr.write(`${m}\n`));
  let toolParser = opts.toolParser;
  if (toolParser !== undefined) getToolParser(toolParser);
  else {
    // The format the template writes calls in is the one the model was trained to emit, even
    // when the template does not show the schemas (DeepSeek-V3's).
    const detected = detectToolParser(source);
    if (detected) {
      toolParser = detected;
      if (!rendersTools) warn(`warning: the chat template (${where}) does not show tool schemas to the model; reading its tool calls as ${detected}`);
    } else {
      toolParser = 'hermes';
      warn(`warning: the chat template (${where}) ${rendersTools ? 'writes tool calls in no known format' : 'renders no tools'}; reading tool calls as hermes (<tool_call>{json}</tool_call>); name the format with --tool-parser`);
    }
  }
  if (toolParser === 'openai') throw new Error('the openai tool parser reads harmony, which only a harmony (gpt-oss) vocabulary has; this tokenizer has none of its special tokens');
  const format: AssistantFormat = Object.freeze({ toolParser, reasoning: detectReasoning(source) });
  const vocabSize = tok.vocabSize;

  const encode = (text: string): number[] => (text.length === 0 ? [] : tok.encode(text));
  // The tokenizer throws on an empty list; an empty turn (max_tokens hit at once) is legal.
  const decode = (ids: number[]): string => (ids.length === 0 ? '' : tok.decode(ids));

  const renderText = (messages: Message[], tools: ToolSchema[], o: { addGenerationPrompt: boolean; enableThinking?: boolean | undefined }): string => {
    const ctx = baseCtx(messages, o.addGenerationPrompt);
    if (tools.length > 0) ctx.tools = tools;
    if (o.enableThinking !== undefined) ctx.enable_thinking = o.enableThinking;
    return tryRender(ctx);
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

  // For the drift check over messages without `token_ids` (see renderFullSpliced).
  const sampledTurns = new SampledTurns();

  const codec: HfChatCodec = {
    name: opts.name ?? 'hf',
    endOfTurnId: eotId,
    stopIds,
    vocabSize,
    format,
    rendersTools,
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
      const parsed = parseToolCalls(decode(end === outputIds.length ? outputIds : outputIds.slice(0, end)), format);
      sampledTurns.remember(parsed.content, parsed.toolCalls, outputIds);
      return parsed;
    },
    encodeAssistant(turn) {
      // Render the turn as a historical one (a user turn follows), so templates that treat the
      // last turn specially (Qwen3's <think> block) do not add to it.
      const msg: Message = { role: 'assistant', content: turn.content ?? '' };
      if (turn.tool_calls && turn.tool_calls.length > 0) msg.tool_calls = turn.tool_calls.map((c) => ({ name: c.name, arguments: c.arguments }));
      // A template may drop part of a historical turn: DeepSeek-V3's the calls of a turn with
      // text, Llama 3.1's the text of a turn with calls (and it refuses two calls), one without
      // tools every call, Qwen3's the reasoning of a turn before the last user message. The model
      // sampled all of it, so such a turn is written as the model writes it: its text verbatim,
      // then the calls in the parser's format (#28). Only turns with calls or a think block can
      // lose anything.
      const calls = msg.tool_calls ?? [];
      const content = msg.content;
      const write = calls.length > 0 || content.includes('</think>') ? getToolParser(format.toolParser).write : undefined;
      const before = renderText(head, [], { addGenerationPrompt: true });
      let text: string;
      try {
        text = renderText([...head, msg, { role: 'user', content: U2 }], [], { addGenerationPrompt: false });
      } catch (e) {
        if (write) return [...encode(write(content, calls)), eotId];
        throw e;
      }
      const cut = text.indexOf(eot, before.length);
      const body = text.slice(before.length, cut);
      if (write && !keepsTurn(parseToolCalls(body, format), content, calls)) return [...encode(write(content, calls)), eotId];
      return [...encode(body), eotId];
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
      const ids = sampledTurns.idsOf(m);
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

/**
 * Whether a rendered turn, parsed back, still has the turn's text (whitespace aside: templates
 * trim) and exactly its calls.
 */
function keepsTurn(parsed: ParsedAssistant, content: string, calls: readonly ToolCall[]): boolean {
  const norm = (x: string): string => x.replace(/\s+/g, ' ').trim();
  if (norm(parsed.content) !== norm(content) || parsed.toolCalls.length !== calls.length) return false;
  return calls.every((c, i) => parsed.toolCalls[i]!.name === c.name && sortedJson(parsed.toolCalls[i]!.arguments) === sortedJson(c.arguments));
}

/** JSON with object keys sorted, to compare arguments whatever order a template wrote them in. */
function sortedJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(sortedJson).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${sortedJson((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}

function singleId(tok: TextTokenizer, t: string): number | undefined {
  const ids = tok.encode(t);
  return ids.length === 1 ? ids[0] : undefined;
}

/**
 * Parses a chat template without loading a tokenizer, for early checks.
 * @throws Error naming `where` when our Jinja (`@huggingface/jinja`) cannot parse it.
 */
export function checkChatTemplate(source: string, where: string): void {
  compileTemplate({ tokenizerJson: {}, tokenizerConfig: {}, chatTemplate: source, templateSource: where });
}

const PROBE_TOOL: ToolSchema = { type: 'function', function: { name: 'probe_tool_q7', description: 'probe', parameters: { type: 'object', properties: {} } } };

/**
 * The template, parsed. A template in a syntax our Jinja lacks fails here, naming where it came from.
 * @throws Error when there is no template or it does not parse.
 */
function compileTemplate(opts: HfCodecOptions): { template: Template; source: string; where: string } {
  const cfg = opts.tokenizerConfig as Record<string, unknown>;
  const source = opts.chatTemplate ?? (typeof cfg.chat_template === 'string' ? cfg.chat_template : undefined);
  const where = opts.templateSource ?? (opts.chatTemplate ? 'chatTemplate option' : 'tokenizer config chat_template');
  if (!source) throw new Error('tokenizer config has no chat_template');
  try {
    return { template: new Template(source), source, where };
  } catch (e) {
    throw new Error(`chat template (${where}) uses Jinja our renderer (@huggingface/jinja) cannot parse: ${(e as Error).message}`, { cause: e });
  }
}

/** Special (added) token texts of a tokenizer.json, longest first. */
function specialTokens(tokenizerJson: object): string[] {
  const added = (tokenizerJson as { added_tokens?: { content: string; special?: boolean }[] }).added_tokens ?? [];
  return added.filter((a) => a.special !== false).map((a) => a.content).sort((a, b) => b.length - a.length);
}

/** The special token the template writes right after the sentinel assistant text, if any. */
function detectEndOfTurn(rendered: string, specials: readonly string[]): string | undefined {
  const at = rendered.indexOf(A);
  if (at < 0) return undefined;
  const after = rendered.slice(at + A.length);
  return specials.find((t) => after.startsWith(t));
}

interface CallShape {
  argsAsText: boolean;
  nullContent: boolean;
}

/**
 * A message as chat templates read it. Tool calls carry both the flat `{name, arguments}` form
 * and OpenAI's `{type, function: {name, arguments}}` (Qwen3 and Llama 3.1 read `.function`);
 * `argsAsText` gives arguments as JSON text for templates that concatenate them, and
 * `nullContent` gives an assistant turn of only tool calls content null, as in OpenAI's format
 * (DeepSeek-V3's template needs both to write the calls at all).
 */
function toTemplateMessage(m: Message, { argsAsText, nullContent }: CallShape): Record<string, unknown> {
  const out: Record<string, unknown> = { role: m.role, content: m.content };
  if (m.tool_calls && m.tool_calls.length > 0) {
    out.tool_calls = m.tool_calls.map((c) => {
      const args = argsAsText ? JSON.stringify(c.arguments) : c.arguments;
      return { type: 'function', name: c.name, arguments: args, function: { name: c.name, arguments: args } };
    });
    if (nullContent && m.content === '') out.content = null;
  }
  if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
  if (m.name !== undefined) out.name = m.name;
  return out;
}
