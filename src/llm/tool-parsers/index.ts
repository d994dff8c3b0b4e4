import type { ToolSchema } from '../../protocol/messages.js';
import { deepseekV3Parser } from './deepseek-v3.js';
import { harmonyParser } from './harmony.js';
import { hermesParser } from './hermes.js';
import { llama3JsonParser } from './llama3-json.js';
import { mistralParser } from './mistral.js';
import { qwen3CoderParser } from './qwen3-coder.js';
import { splitThink, type ReasoningFormat } from './reasoning.js';
import type { ParsedText, ToolParser } from './tool-parser.js';

export type { MalformedToolCall, ParsedText, ToolParser, WrittenCall } from './tool-parser.js';
export { splitThink, REASONING_FORMATS, type ReasoningFormat, type ReasoningSplit } from './reasoning.js';
export { hermesParser, qwen3CoderParser, llama3JsonParser, mistralParser, deepseekV3Parser, harmonyParser };
export { parseHarmony, splitHarmony, HARMONY, type HarmonyMessage, type HarmonyParse } from './harmony.js';

/** Tool-call formats by name (the names vLLM and SGLang use for `--tool-call-parser`). */
export const TOOL_PARSERS: Readonly<Record<string, ToolParser>> = Object.freeze({
  hermes: hermesParser,
  qwen3_coder: qwen3CoderParser,
  llama3_json: llama3JsonParser,
  mistral: mistralParser,
  deepseek_v3: deepseekV3Parser,
  openai: harmonyParser,
});

/** Names accepted by `--tool-parser`. */
export const TOOL_PARSER_NAMES = Object.keys(TOOL_PARSERS);

/**
 * The parser named `name`.
 * @throws Error naming the known parsers when `name` is not one.
 */
export function getToolParser(name: string): ToolParser {
  const p = TOOL_PARSERS[name];
  if (!p) throw new Error(`unknown tool parser "${name}"; known: ${TOOL_PARSER_NAMES.join(', ')}`);
  return p;
}

/**
 * The tool-call format a chat template writes, read from its text (the delimiters it renders
 * around a call), or null when the template shows none. Order matters: Qwen3-Coder's template
 * also has `<tool_call>`, so its `<function=` is looked for first.
 */
export function detectToolParser(template: string): string | null {
  if (template.includes('<|channel|>') && template.includes('<|call|>')) return 'openai';
  if (template.includes('<function=') && template.includes('<parameter=')) return 'qwen3_coder';
  if (template.includes('<tool_call>')) return 'hermes';
  if (template.includes('[TOOL_CALLS]')) return 'mistral';
  if (template.includes('tool▁calls▁begin')) return 'deepseek_v3';
  if (template.includes('<|python_tag|>') || (template.includes('"parameters"') && template.includes('<|eot_id|>'))) return 'llama3_json';
  return null;
}

/** The reasoning format a template knows (`think` when it handles `<think>` blocks), or null. */
export function detectReasoning(template: string): ReasoningFormat | null {
  return template.includes('</think>') || template.includes('<think>') ? 'think' : null;
}

/** A tool parser plus the reasoning split: what a codec (or an OpenAI server) needs per turn. */
export interface TextParser {
  readonly toolParser: string;
  readonly reasoning: ReasoningFormat | null;
  /** Splits sampled text: reasoning first, then tool calls in what follows. Never throws. */
  parse(text: string, tools?: readonly ToolSchema[]): ParsedText;
}

/**
 * Combines a tool-call format and an optional reasoning format. Tool calls written inside the
 * reasoning block are thinking, not calls.
 * @throws Error when `toolParser` is not a known name.
 */
export function createTextParser(toolParser: string, reasoning: ReasoningFormat | null): TextParser {
  const tp = getToolParser(toolParser);
  return {
    toolParser,
    reasoning,
    parse(text, tools) {
      const split = reasoning === 'think' ? splitThink(text) : { reasoning: null, raw: '', rest: text };
      const r = tp.parse(split.rest, tools);
      // A format with reasoning of its own (harmony's analysis channel) gives it with the calls.
      const out: ParsedText = { content: r.content, toolCalls: r.toolCalls, reasoning: r.reasoning !== undefined ? r.reasoning : split.reasoning, malformed: r.malformed };
      if (r.malformed.length > 0) out.error = r.malformed.map((m) => m.error).join('; ');
      return out;
    },
  };
}
