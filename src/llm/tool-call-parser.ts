import type { ToolCall } from '../protocol/messages.js';
import type { ParsedAssistant } from './chat-codec.js';

const OPEN = '<tool_call>';
const CLOSE = '</tool_call>';

/**
 * Splits decoded assistant text into content and Qwen/Hermes tool calls
 * (`<tool_call>{"name": .., "arguments": ..}</tool_call>`, several per turn). A block whose
 * JSON does not parse, lacks a string `name`, has non-object `arguments`, or is never closed
 * lands in `malformed` (the policy's own error), never throws.
 *
 * Content is the text outside the blocks; when there were blocks it is trimmed, since the
 * templates put their own newlines around tool calls. Without blocks it is returned verbatim so
 * a re-render of the conversation gives back the sampled text.
 */
export function parseToolCalls(text: string): ParsedAssistant {
  if (!text.includes(OPEN)) return { content: text, toolCalls: [], malformed: [] };
  const toolCalls: ToolCall[] = [];
  const malformed: { raw: string; error: string }[] = [];
  let content = '';
  let pos = 0;
  for (;;) {
    const start = text.indexOf(OPEN, pos);
    if (start < 0) {
      content += text.slice(pos);
      break;
    }
    content += text.slice(pos, start);
    const end = text.indexOf(CLOSE, start + OPEN.length);
    if (end < 0) {
      const raw = text.slice(start);
      malformed.push({ raw, error: 'unclosed <tool_call> block' });
      break;
    }
    const raw = text.slice(start + OPEN.length, end);
    const parsed = parseOne(raw);
    if ('error' in parsed) malformed.push({ raw, error: parsed.error });
    else toolCalls.push(parsed.call);
    pos = end + CLOSE.length;
  }
  return { content: content.trim(), toolCalls, malformed };
}

function parseOne(raw: string): { call: ToolCall } | { error: string } {
  let v: unknown;
  try {
    v = JSON.parse(raw.trim());
  } catch (e) {
    return { error: `invalid JSON: ${(e as Error).message}` };
  }
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
