import type { ToolCall } from '../../protocol/messages.js';
import { argumentsText, parseJson, splitBlocks, toToolCall, type ToolParser } from './tool-parser.js';

const CALLS_BEGIN = '<｜tool▁calls▁begin｜>';
const CALLS_END = '<｜tool▁calls▁end｜>';
const CALL_BEGIN = '<｜tool▁call▁begin｜>';
const CALL_END = '<｜tool▁call▁end｜>';
const SEP = '<｜tool▁sep｜>';
const FENCED = /^\s*function\s*$/;

/**
 * DeepSeek-V3 / R1: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{..}\n```<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>`.
 * Content is the text before the calls block. A call whose JSON does not parse is malformed;
 * a missing `<｜tool▁calls▁end｜>` is tolerated (generation may stop right after the last call).
 */
export const deepseekV3Parser: ToolParser = {
  name: 'deepseek_v3',
  parse(text) {
    const at = text.indexOf(CALLS_BEGIN);
    if (at < 0) return { content: text, toolCalls: [], malformed: [] };
    const endAt = text.indexOf(CALLS_END, at);
    const block = text.slice(at + CALLS_BEGIN.length, endAt < 0 ? undefined : endAt);
    const inner = splitBlocks(block, CALL_BEGIN, CALL_END, parseCall);
    const after = endAt < 0 ? '' : text.slice(endAt + CALLS_END.length);
    const toolCalls: ToolCall[] = inner.toolCalls;
    return { content: (text.slice(0, at) + after).trim(), toolCalls, malformed: inner.malformed };
  },
  write(content, calls) {
    if (calls.length === 0) return content;
    // As DeepSeek-V3 samples (and its template writes a calls-only turn): the text, then the calls block.
    const each = calls.map((c) => `${CALL_BEGIN}function${SEP}${c.name}\n\`\`\`json\n${argumentsText(c, JSON.stringify)}\n\`\`\`${CALL_END}`);
    return `${content}${CALLS_BEGIN}${each.join('\n')}${CALLS_END}`;
  },
};

function parseCall(inner: string): { call: ToolCall } | { error: string } {
  const k = inner.indexOf(SEP);
  if (k < 0 || !FENCED.test(inner.slice(0, k))) return { error: `expected function${SEP}NAME` };
  const rest = inner.slice(k + SEP.length);
  const nl = rest.indexOf('\n');
  const name = (nl < 0 ? rest : rest.slice(0, nl)).trim();
  const m = /^```(?:json)?\s*\n([\s\S]*?)\n?```\s*$/.exec(nl < 0 ? '' : rest.slice(nl + 1));
  if (!m) return { error: 'expected the arguments in a ```json fenced block' };
  const j = parseJson(m[1]!);
  return 'error' in j ? j : toToolCall({ name, arguments: j.value });
}
