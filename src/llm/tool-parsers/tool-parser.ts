import type { ToolCall, ToolSchema } from '../../protocol/messages.js';

/** A tool-call block the policy wrote but that does not parse: its own error, reported back to it. */
export interface MalformedToolCall {
  /** The block as sampled (without its delimiters where the format has them). */
  raw: string;
  /** What is wrong with it, said to the model in the error observation. */
  error: string;
}

/**
 * One sampled assistant text split by a {@link ToolParser}. `content` is the text outside the
 * tool-call blocks and outside the reasoning block; `reasoning` the reasoning block's text (null
 * when the turn has none). `malformed` lists blocks that did not parse, and `error` summarises
 * them (absent when there are none). Never thrown: a malformed call is the policy's fault, kept
 * in training and reported to the model (the reference's `AgentToolCallError` rule).
 */
export interface ParsedText {
  content: string;
  toolCalls: ToolCall[];
  reasoning: string | null;
  malformed: MalformedToolCall[];
  error?: string;
}

/** A tool-call format: how one model family writes tool calls in its sampled text. */
export interface ToolParser {
  /** Registry name (`hermes`, `qwen3_coder`, `llama3_json`, `mistral`, `deepseek_v3`, `openai`). */
  readonly name: string;
  /**
   * Splits text that has no reasoning block left in it. `tools` (optional) lets formats whose
   * arguments are untyped text (`qwen3_coder`) convert them by the tool's JSON schema. A format
   * whose reasoning is part of its own structure (harmony's analysis channel) returns it as
   * `reasoning`; the others leave it out. Never throws.
   */
  parse(text: string, tools?: readonly ToolSchema[]): Omit<ParsedText, 'reasoning' | 'error'> & { reasoning?: string | null };
  /**
   * The text a model of this family samples for a turn of `content` followed by `calls` (no
   * end-of-turn token), such that {@link parse} gives back that content (up to surrounding
   * whitespace) and those calls. A codec writes a turn this way where its chat template would
   * lose part of it (DeepSeek-V3's drops the calls of a turn with text, Llama 3.1's the text of a
   * turn with calls, a template without tools both). Absent for harmony, whose codec writes whole
   * messages itself.
   */
  write?(content: string, calls: readonly WrittenCall[]): string;
}

/**
 * A call to write: `arguments` an object, or a string written verbatim where the JSON would go
 * (a call a server returned with arguments that are not a JSON object: written as sent, the
 * parser reads it back as the policy's malformed call).
 */
export interface WrittenCall {
  name: string;
  arguments: Record<string, unknown> | string;
}

/** The call's arguments as JSON text: a raw string as it is, an object by `json`. */
export function argumentsText(c: WrittenCall, json: (v: unknown) => string = spacedJson): string {
  return typeof c.arguments === 'string' ? c.arguments : json(c.arguments);
}

/**
 * JSON as Python's `json.dumps` writes it by default (`", "` and `": "` separators), which is
 * how chat templates' `tojson` shows tool calls to a model, so written calls look like rendered ones.
 */
export function spacedJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map((x) => spacedJson(x === undefined ? null : x)).join(', ')}]`;
  if (v !== null && typeof v === 'object') {
    const parts: string[] = [];
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) if (x !== undefined) parts.push(`${JSON.stringify(k)}: ${spacedJson(x)}`);
    return `{${parts.join(', ')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}

/** `content`, then `sep`, then `calls`: the separator only where both sides have text. */
export function joinTurn(content: string, sep: string, calls: string): string {
  return content.length === 0 ? calls : calls.length === 0 ? content : content + sep + calls;
}

/** Checks a parsed `{name, arguments|parameters}` object; the message is the model's error text. */
export function toToolCall(v: unknown): { call: ToolCall } | { error: string } {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return { error: 'tool call is not a JSON object' };
  const o = v as Record<string, unknown>;
  if (typeof o.name !== 'string' || o.name.length === 0) return { error: 'tool call has no string "name"' };
  let args = o.arguments ?? o.parameters ?? {};
  if (typeof args === 'string') {
    // Some models emit arguments as a JSON string, as OpenAI's wire format does.
    try {
      args = JSON.parse(args);
    } catch {
      return { error: '"arguments" is a string that is not JSON' };
    }
  }
  if (typeof args !== 'object' || args === null || Array.isArray(args)) return { error: '"arguments" is not a JSON object' };
  return { call: { name: o.name, arguments: args as Record<string, unknown> } };
}

/** `JSON.parse` that reports instead of throwing. */
export function parseJson(raw: string): { value: unknown } | { error: string } {
  try {
    return { value: JSON.parse(raw) };
  } catch (e) {
    return { error: `invalid JSON: ${(e as Error).message}` };
  }
}

/**
 * Splits `text` on `open … close` blocks (several per turn), handing each block's inside to
 * `parseBlock`. An unclosed block is malformed. Content is the text outside the blocks, trimmed
 * when there were blocks (templates put their own newlines around tool calls) and verbatim
 * otherwise, so a re-render of the conversation gives back the sampled text.
 */
export function splitBlocks(
  text: string,
  open: string,
  close: string,
  parseBlock: (inner: string) => { call: ToolCall } | { error: string },
): Omit<ParsedText, 'reasoning' | 'error'> {
  if (!text.includes(open)) return { content: text, toolCalls: [], malformed: [] };
  const toolCalls: ToolCall[] = [];
  const malformed: MalformedToolCall[] = [];
  let content = '';
  let pos = 0;
  for (;;) {
    const start = text.indexOf(open, pos);
    if (start < 0) {
      content += text.slice(pos);
      break;
    }
    content += text.slice(pos, start);
    const end = text.indexOf(close, start + open.length);
    if (end < 0) {
      malformed.push({ raw: text.slice(start), error: `unclosed ${open} block` });
      break;
    }
    const raw = text.slice(start + open.length, end);
    const parsed = parseBlock(raw);
    if ('error' in parsed) malformed.push({ raw, error: parsed.error });
    else toolCalls.push(parsed.call);
    pos = end + close.length;
  }
  return { content: content.trim(), toolCalls, malformed };
}
