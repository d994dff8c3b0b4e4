import type { ToolCall, ToolSchema } from '../../protocol/messages.js';
import { joinTurn, splitBlocks, type ToolParser, type WrittenCall } from './tool-parser.js';

/**
 * Qwen3-Coder: XML parameters inside `<tool_call>`:
 * `<tool_call>\n<function=name>\n<parameter=x>\nvalue\n</parameter>\n</function>\n</tool_call>`.
 * A value is text; it is converted by the tool's schema when `tools` names its type (string
 * stays text), else read as JSON when it parses as JSON and kept as text when not (vLLM's rule).
 */
export const qwen3CoderParser: ToolParser = {
  name: 'qwen3_coder',
  parse(text, tools) {
    return splitBlocks(text, '<tool_call>', '</tool_call>', (inner) => parseFunction(inner, tools));
  },
  write(content, calls) {
    // As Qwen3-Coder's template renders a call: strings as they are, other values as JSON.
    const block = (c: WrittenCall): string => {
      // Arguments that are not an object have no parameters to write: as sent, malformed on reading.
      if (typeof c.arguments === 'string') return `<tool_call>\n<function=${c.name}>\n${c.arguments}\n</function>\n</tool_call>`;
      const params = Object.entries(c.arguments).map(([k, v]) => `<parameter=${k}>\n${typeof v === 'string' ? v : JSON.stringify(v)}\n</parameter>\n`);
      return `<tool_call>\n<function=${c.name}>\n${params.join('')}</function>\n</tool_call>`;
    };
    return joinTurn(content, '\n', calls.map(block).join('\n'));
  },
};

const FN = /^\s*<function=([^>\n]+)>([\s\S]*?)<\/function>\s*$/;
const PARAM = /<parameter=([^>\n]+)>([\s\S]*?)<\/parameter>/g;

function parseFunction(inner: string, tools: readonly ToolSchema[] | undefined): { call: ToolCall } | { error: string } {
  const m = FN.exec(inner);
  if (!m) return { error: 'expected <function=NAME> ... </function> inside <tool_call>' };
  const name = m[1]!.trim();
  if (name.length === 0) return { error: 'empty function name' };
  const body = m[2]!;
  const props = (tools?.find((t) => t.function.name === name)?.function.parameters as { properties?: Record<string, { type?: unknown }> } | undefined)?.properties;
  const args: Record<string, unknown> = {};
  let rest = body;
  for (const p of body.matchAll(PARAM)) {
    const key = p[1]!.trim();
    // The template writes the value between newlines; they are not part of it.
    const raw = p[2]!.replace(/^\n/, '').replace(/\n$/, '');
    args[key] = convert(raw, props?.[key]?.type);
    rest = rest.replace(p[0], '');
  }
  if (rest.includes('<parameter=')) return { error: 'unclosed <parameter=...> block' };
  if (rest.trim().length > 0) return { error: `unexpected text inside <function=${name}>: ${rest.trim().slice(0, 80)}` };
  return { call: { name, arguments: args } };
}

function convert(raw: string, type: unknown): unknown {
  if (type === 'string') return raw;
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}
