import type { ToolSchema } from '../protocol/messages.js';
import type { ParsedAssistant } from './chat-codec.js';
import { getToolParser, splitThink, type ReasoningFormat } from './tool-parsers/index.js';

/** Which formats {@link parseToolCalls} reads. Default: Hermes tool calls, `<think>` reasoning. */
export interface AssistantFormat {
  toolParser: string;
  reasoning: ReasoningFormat | null;
}

const DEFAULT_FORMAT: AssistantFormat = { toolParser: 'hermes', reasoning: 'think' };

/**
 * Splits decoded assistant text into content and tool calls in the given format (default:
 * Hermes / Qwen `<tool_call>{json}</tool_call>` with `<think>` reasoning). Malformed blocks land
 * in `malformed` (the policy's own error, reported back to it and kept in training), never thrown.
 *
 * `content` keeps the reasoning block as sampled, in front of the text outside the tool-call
 * blocks: templates such as Qwen3's and DeepSeek-R1's split it off themselves when they render
 * the turn again, so the message stays what the model wrote. `reasoning` holds the block's
 * text. Content is trimmed when there were tool-call blocks and verbatim otherwise, so a
 * re-render of a turn without calls gives back the sampled text.
 *
 * @throws Error only when `format.toolParser` is not a known parser name.
 */
export function parseToolCalls(text: string, format: AssistantFormat = DEFAULT_FORMAT, tools?: readonly ToolSchema[]): ParsedAssistant {
  const split = format.reasoning === 'think' ? splitThink(text) : { reasoning: null, raw: '', rest: text };
  const p = getToolParser(format.toolParser).parse(split.rest, tools);
  const hadBlocks = p.toolCalls.length > 0 || p.malformed.length > 0;
  const content = split.reasoning === null ? p.content : hadBlocks ? (split.raw + p.content).trim() : text;
  const out: ParsedAssistant = { content, toolCalls: p.toolCalls, malformed: p.malformed };
  if (split.reasoning !== null) out.reasoning = split.reasoning;
  return out;
}
