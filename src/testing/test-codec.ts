import type { ChatCodec, ParsedAssistant } from '../llm/chat-codec.js';
import type { Message, ToolCall, ToolSchema } from '../protocol/messages.js';

/** Special ids of the {@link TestCodec}. Text ids start at {@link TEXT_OFFSET}. */
export const TEST_TOKENS = { imStart: 1, imEnd: 2 } as const;
/** Id of a character is its code point plus this offset. */
export const TEXT_OFFSET = 16;

const SPECIAL_TEXT: Record<number, string> = { 1: '<|im_start|>', 2: '<|im_end|>' };
const OPEN = '<tool_call>';
const CLOSE = '</tool_call>';
const NEWLINE = 10 + TEXT_OFFSET;
const toolBlocks = new WeakMap<readonly ToolSchema[], number[]>();
/** Reused by decodeRange: this codec sits on the benchmark's hot path. */
let scratch = Buffer.allocUnsafe(8192);

/**
 * Decodes ids[from, to): text ids are written into one reused buffer and turned into a string in
 * one call (latin1 when every character fits a byte, else UTF-16 with surrogate pairs), rather
 * than `String.fromCodePoint(...)` over an array of code points, which allocated ~20 bytes per
 * character on the benchmark.
 */
function decodeRange(ids: number[], from: number, to: number): string {
  let wide = false;
  for (let i = from; i < to; i++) if (ids[i]! - TEXT_OFFSET > 0xff) wide = true;
  if (scratch.length < 4 * (to - from)) scratch = Buffer.allocUnsafe(4 * (to - from));
  const enc = wide ? 'utf16le' : 'latin1';
  let out = '';
  let n = 0;
  for (let i = from; i < to; i++) {
    const id = ids[i]!;
    if (id >= TEXT_OFFSET) {
      const cp = id - TEXT_OFFSET;
      if (!wide) scratch[n++] = cp;
      else if (cp <= 0xffff) n = scratch.writeUInt16LE(cp, n);
      else {
        n = scratch.writeUInt16LE(0xd800 + ((cp - 0x10000) >> 10), n);
        n = scratch.writeUInt16LE(0xdc00 + ((cp - 0x10000) & 0x3ff), n);
      }
    } else {
      if (n) out += scratch.toString(enc, 0, n);
      n = 0;
      out += SPECIAL_TEXT[id] ?? '';
    }
  }
  return n ? out + scratch.toString(enc, 0, n) : out;
}

/**
 * A fast, deterministic {@link ChatCodec} for tests and benchmarks: one id per character
 * (code point + 16), `<|im_start|>` = 1 and `<|im_end|>` = 2 (end of turn), a ChatML-like
 * layout, and tool calls as `<tool_call>{"name":…,"arguments":…}</tool_call>` in the text.
 * It is append-only by construction and has `renderFull`, so drift checks pass unless a test
 * makes them fail on purpose.
 */
export class TestCodec implements ChatCodec {
  readonly name = 'test';

  encode(text: string): number[] {
    return this.encodeInto(text, []);
  }

  decode(ids: number[]): string {
    return decodeRange(ids, 0, ids.length);
  }

  private encodeInto(text: string, out: number[]): number[] {
    for (let i = 0; i < text.length; i++) {
      const cp = text.codePointAt(i)!;
      if (cp > 0xffff) i++;
      out.push(cp + TEXT_OFFSET);
    }
    return out;
  }

  // encodePrompt and encodeContinuation size their array once from an upper bound (one id per
  // UTF-16 unit at most) and trim it, instead of growing it push by push: together with the
  // builder's flat list, that growth was the largest garbage of the benchmark's fakes.

  encodePrompt(messages: Message[], tools: ToolSchema[]): number[] {
    let head: number[] | undefined;
    if (tools.length > 0) {
      // The tools block of a tools array is the same on every call: encoded once per array.
      head = toolBlocks.get(tools);
      if (!head) toolBlocks.set(tools, (head = this.block('system', `tools: ${tools.map((t) => t.function.name).join(',')}`, [])));
    }
    const texts = assistantTexts(messages);
    const w = new Writer(renderBound(messages, texts) + (head?.length ?? 0) + GENERATION_PROMPT_LEN);
    if (head) for (let i = 0; i < head.length; i++) w.ids[w.n++] = head[i]!;
    renderAll(messages, texts, w);
    w.generationPrompt();
    return w.done();
  }

  encodeContinuation(newMessages: Message[], lastOutputIds: number[]): number[] {
    const texts = assistantTexts(newMessages);
    const w = new Writer(2 + renderBound(newMessages, texts) + GENERATION_PROMPT_LEN);
    // A turn cut by max_tokens has no end-of-turn id yet; close it the way a full render would.
    if (lastOutputIds[lastOutputIds.length - 1] !== TEST_TOKENS.imEnd) w.ids[w.n++] = TEST_TOKENS.imEnd;
    w.ids[w.n++] = NEWLINE;
    renderAll(newMessages, texts, w);
    w.generationPrompt();
    return w.done();
  }

  encodeAssistant(turn: { content?: string | undefined; tool_calls?: { name: string; arguments: Record<string, unknown> }[] | undefined }): number[] {
    const text = assistantText(turn.content ?? '', turn.tool_calls ?? []);
    // Sized once (one id per UTF-16 unit at most) instead of grown by push: this is every
    // scripted turn of the benchmark.
    const ids = new Array<number>(text.length + 1);
    let n = 0;
    for (let i = 0; i < text.length; i++) {
      const cp = text.codePointAt(i)!;
      if (cp > 0xffff) i++;
      ids[n++] = cp + TEXT_OFFSET;
    }
    ids[n++] = TEST_TOKENS.imEnd;
    ids.length = n;
    return ids;
  }

  parseAssistant(outputIds: number[]): ParsedAssistant {
    let end = outputIds.indexOf(TEST_TOKENS.imEnd);
    if (end < 0) end = outputIds.length;
    const text = decodeRange(outputIds, 0, end);
    const toolCalls: ToolCall[] = [];
    const malformed: { raw: string; error: string }[] = [];
    // indexOf scanning, same matches as /<tool_call>([\s\S]*?)<\/tool_call>/g without the
    // regex's match arrays and replacer calls (this parses every turn of the benchmark).
    let content = '';
    let pos = 0;
    for (;;) {
      const a = text.indexOf(OPEN, pos);
      if (a < 0) break;
      const b = text.indexOf(CLOSE, a + OPEN.length);
      if (b < 0) break;
      content += text.slice(pos, a);
      const body = text.slice(a + OPEN.length, b);
      pos = b + CLOSE.length;
      try {
        const v = JSON.parse(body) as { name?: unknown; arguments?: unknown };
        if (typeof v.name !== 'string' || !v.name) throw new Error('missing "name"');
        const args = v.arguments ?? {};
        if (typeof args !== 'object' || args === null || Array.isArray(args)) throw new Error('"arguments" is not an object');
        toolCalls.push({ name: v.name, arguments: args as Record<string, unknown> });
      } catch (e) {
        malformed.push({ raw: text.slice(a, pos), error: e instanceof Error ? e.message : String(e) });
      }
    }
    content = pos === 0 ? text : content + text.slice(pos);
    return { content, toolCalls, malformed };
  }

  renderFull(messages: Message[], tools: ToolSchema[]): number[] {
    return this.encodePrompt(messages, tools);
  }

  private block(role: string, content: string, out: number[]): number[] {
    out.push(TEST_TOKENS.imStart);
    this.encodeInto(role, out);
    out.push(NEWLINE);
    this.encodeInto(content, out);
    out.push(TEST_TOKENS.imEnd, NEWLINE);
    return out;
  }

}

const ASSISTANT_HEADER = 'assistant\n';
const GENERATION_PROMPT_LEN = 1 + ASSISTANT_HEADER.length;

/** Fills a pre-sized id array by index; `done()` trims it to what was written. */
class Writer {
  readonly ids: number[];
  n = 0;

  constructor(bound: number) {
    this.ids = new Array<number>(bound);
  }

  text(text: string): void {
    const ids = this.ids;
    for (let i = 0; i < text.length; i++) {
      const cp = text.codePointAt(i)!;
      if (cp > 0xffff) i++;
      ids[this.n++] = cp + TEXT_OFFSET;
    }
  }

  /** imStart role NL content imEnd NL. */
  block(role: string, content: string): void {
    this.ids[this.n++] = TEST_TOKENS.imStart;
    this.text(role);
    this.ids[this.n++] = NEWLINE;
    this.text(content);
    this.ids[this.n++] = TEST_TOKENS.imEnd;
    this.ids[this.n++] = NEWLINE;
  }

  generationPrompt(): void {
    this.ids[this.n++] = TEST_TOKENS.imStart;
    this.text(ASSISTANT_HEADER);
  }

  done(): number[] {
    this.ids.length = this.n;
    return this.ids;
  }
}

/** The templated text of each assistant message (null for other roles), computed once. */
function assistantTexts(messages: Message[]): (string | null)[] {
  const out = new Array<string | null>(messages.length);
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i]!;
    out[i] = m.role === 'assistant' ? assistantText(m.content, m.tool_calls ?? []) : null;
  }
  return out;
}

/** At least as many ids as rendering the messages writes (a block adds 4 ids to its text). */
function renderBound(messages: Message[], texts: (string | null)[]): number {
  let n = 0;
  for (let i = 0; i < messages.length; i++) {
    const t = texts[i] ?? null;
    n += 4 + (t === null ? messages[i]!.role.length + messages[i]!.content.length : ASSISTANT_HEADER.length - 1 + t.length);
  }
  return n;
}

function renderAll(messages: Message[], texts: (string | null)[], w: Writer): void {
  for (let i = 0; i < messages.length; i++) {
    const t = texts[i] ?? null;
    if (t === null) w.block(messages[i]!.role, messages[i]!.content);
    else w.block('assistant', t);
  }
}

function assistantText(content: string, calls: { name: string; arguments: Record<string, unknown> }[]): string {
  return content + calls.map((c) => `<tool_call>${JSON.stringify({ name: c.name, arguments: c.arguments })}</tool_call>`).join('');
}
