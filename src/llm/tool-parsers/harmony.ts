import type { ToolCall } from '../../protocol/messages.js';
import { parseJson, toToolCall, type MalformedToolCall, type ToolParser } from './tool-parser.js';

/**
 * OpenAI's harmony format (gpt-oss): the sampled text is a run of messages
 * `<|start|>assistant{header}<|message|>{content}{end}`, the first one's `<|start|>assistant`
 * being the generation prompt's. The header holds `<|channel|>{analysis|commentary|final}`, a
 * recipient `to=functions.NAME` (in the role or the channel part) and a content type
 * (`<|constrain|>json` or `json`); a message ends with `<|end|>`, or with `<|call|>` (a tool
 * call: the engine stops) or `<|return|>` (the answer: the engine stops).
 */
export const HARMONY = {
  start: '<|start|>',
  end: '<|end|>',
  message: '<|message|>',
  channel: '<|channel|>',
  constrain: '<|constrain|>',
  call: '<|call|>',
  return: '<|return|>',
} as const;

/** One message of a harmony completion. */
export interface HarmonyMessage {
  /** `analysis`, `commentary`, `final`, or null when the header names none. */
  channel: string | null;
  /** `functions.bash`, `python`, `browser.search`…, or null for a message to the user. */
  recipient: string | null;
  /** `<|constrain|>json`, `json`, or null. */
  contentType: string | null;
  content: string;
  /** The token that closed it, or null when the text ended first (cut by `max_tokens`). */
  terminator: '<|end|>' | '<|call|>' | '<|return|>' | null;
}

/** A harmony completion read as chat: what {@link parseHarmony} returns. */
export interface HarmonyParse {
  /** The `final` channel's text, after any user-visible `commentary` preamble. */
  content: string;
  toolCalls: ToolCall[];
  malformed: MalformedToolCall[];
  /** The `analysis` channel's text (the chain of thought), or null when there is none. */
  reasoning: string | null;
  messages: HarmonyMessage[];
}

const TERMINATORS = [HARMONY.end, HARMONY.call, HARMONY.return] as const;

/**
 * Splits a harmony completion (decoded with its special tokens) into its messages. Text that
 * does not follow the format (a header without `<|message|>`) becomes a message of no channel
 * holding that text, so nothing the model wrote is lost.
 */
export function splitHarmony(text: string): HarmonyMessage[] {
  const out: HarmonyMessage[] = [];
  let pos = 0;
  let first = true;
  while (pos < text.length) {
    if (!first) {
      if (!text.startsWith(HARMONY.start, pos)) {
        // Stray text between messages: keep it as a message of its own.
        const next = text.indexOf(HARMONY.start, pos);
        const stop = next < 0 ? text.length : next;
        stray(out, text.slice(pos, stop));
        pos = stop;
        continue;
      }
      pos += HARMONY.start.length;
      // The role (always assistant in a completion) runs to the first header part.
      const role = /^[^<\s]*/.exec(text.slice(pos))![0];
      pos += role.length;
    }
    first = false;
    const msgAt = text.indexOf(HARMONY.message, pos);
    const nextStart = text.indexOf(HARMONY.start, pos);
    if (msgAt < 0 || (nextStart >= 0 && nextStart < msgAt)) {
      const stop = nextStart < 0 ? text.length : nextStart;
      stray(out, text.slice(pos, stop));
      pos = stop;
      continue;
    }
    const header = readHeader(text.slice(pos, msgAt));
    const bodyAt = msgAt + HARMONY.message.length;
    let endAt = text.length;
    let terminator: HarmonyMessage['terminator'] = null;
    for (const t of TERMINATORS) {
      const at = text.indexOf(t, bodyAt);
      if (at >= 0 && at < endAt) {
        endAt = at;
        terminator = t;
      }
    }
    out.push({ ...header, content: text.slice(bodyAt, endAt), terminator });
    pos = terminator === null ? text.length : endAt + terminator.length;
  }
  return out;
}

/** Text outside the format, kept as a message of no channel (nothing, when empty). */
function stray(out: HarmonyMessage[], content: string): void {
  if (content !== '') out.push({ channel: null, recipient: null, contentType: null, content, terminator: null });
}

/** Reads `[ to=R]<|channel|>C[ to=R][ <|constrain|>json| json]` (either order, as the model writes it). */
function readHeader(h: string): Pick<HarmonyMessage, 'channel' | 'recipient' | 'contentType'> {
  let recipient: string | null = null;
  const to = / to=([^\s<]+)/.exec(h);
  if (to) {
    recipient = to[1]!;
    h = h.slice(0, to.index) + h.slice(to.index + to[0].length);
  }
  let contentType: string | null = null;
  const constrained = h.indexOf(HARMONY.constrain);
  if (constrained >= 0) {
    contentType = HARMONY.constrain + h.slice(constrained + HARMONY.constrain.length).trim();
    h = h.slice(0, constrained);
  }
  let channel: string | null = null;
  const ch = h.indexOf(HARMONY.channel);
  if (ch >= 0) {
    const words = h.slice(ch + HARMONY.channel.length).trim().split(/\s+/);
    channel = words[0] || null;
    if (contentType === null && words.length > 1) contentType = words.slice(1).join(' ');
  }
  return { channel, recipient, contentType };
}

/**
 * Reads a harmony completion as chat, as vLLM's `openai` tool parser and `openai_gptoss`
 * reasoning parser do: `analysis` is the reasoning; a message with a `functions.*` recipient is
 * a tool call whose content is its JSON arguments; `commentary` without a recipient (a preamble)
 * and `final` are the content. A call to another namespace (the built-in `python` or
 * `browser.*` tools, which this runtime does not offer) and arguments that are not a JSON
 * object are malformed calls: the policy's error, reported back to it. Never throws.
 */
export function parseHarmony(text: string): HarmonyParse {
  const messages = splitHarmony(text);
  const toolCalls: ToolCall[] = [];
  const malformed: MalformedToolCall[] = [];
  const reasoning: string[] = [];
  const content: string[] = [];
  for (const m of messages) {
    if (m.recipient !== null) {
      if (!m.recipient.startsWith('functions.') || m.recipient.length === 'functions.'.length) {
        malformed.push({ raw: m.content, error: `tool call to "${m.recipient}": only the functions namespace (to=functions.NAME) has tools` });
        continue;
      }
      const args = parseJson(m.content.trim() === '' ? '{}' : m.content);
      const checked = 'error' in args ? args : toToolCall({ name: m.recipient.slice('functions.'.length), arguments: args.value });
      if ('error' in checked) malformed.push({ raw: m.content, error: checked.error });
      else toolCalls.push(checked.call);
    } else if (m.channel === 'analysis') reasoning.push(m.content);
    else content.push(m.content);
  }
  return { content: content.join('\n'), toolCalls, malformed, reasoning: reasoning.length > 0 ? reasoning.join('\n') : null, messages };
}

/** `--tool-parser openai`: gpt-oss's harmony tool calls (vLLM's name for the format). */
export const harmonyParser: ToolParser = {
  name: 'openai',
  parse(text) {
    const p = parseHarmony(text);
    return { content: p.content, toolCalls: p.toolCalls, malformed: p.malformed, reasoning: p.reasoning };
  },
};
