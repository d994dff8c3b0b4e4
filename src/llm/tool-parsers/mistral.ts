import type { ToolCall } from '../../protocol/messages.js';
import { argumentsText, parseJson, toToolCall, type MalformedToolCall, type ToolParser } from './tool-parser.js';

const TAG = '[TOOL_CALLS]';
const ARGS = '[ARGS]';

/**
 * Mistral: content, then `[TOOL_CALLS]` and the calls. Two generations of the format: a JSON
 * array `[{"name": .., "arguments": {..}}, ..]` (tokenizer v3, Mistral 7B v0.3 / Nemo), and
 * `name[ARGS]{json}` repeated after each `[TOOL_CALLS]` (tokenizer v11+, Mistral Small 3.2 /
 * Magistral). Whatever after the tag does not parse is malformed.
 */
export const mistralParser: ToolParser = {
  name: 'mistral',
  parse(text) {
    const at = text.indexOf(TAG);
    if (at < 0) return { content: text, toolCalls: [], malformed: [] };
    const content = text.slice(0, at).trim();
    const toolCalls: ToolCall[] = [];
    const malformed: MalformedToolCall[] = [];
    const parts = text.slice(at + TAG.length).split(TAG);
    for (const part of parts) {
      const p = part.trim();
      if (p.includes(ARGS)) {
        const k = p.indexOf(ARGS);
        const j = parseJson(p.slice(k + ARGS.length).trim());
        const r = 'error' in j ? j : toToolCall({ name: p.slice(0, k).trim(), arguments: j.value });
        if ('error' in r) malformed.push({ raw: p, error: r.error });
        else toolCalls.push(r.call);
        continue;
      }
      const j = parseJson(p);
      if ('error' in j) {
        malformed.push({ raw: p, error: j.error });
        continue;
      }
      const list = Array.isArray(j.value) ? j.value : [j.value];
      if (list.length === 0) malformed.push({ raw: p, error: 'empty tool-call list' });
      for (const v of list) {
        const r = toToolCall(v);
        if ('error' in r) malformed.push({ raw: JSON.stringify(v), error: r.error });
        else toolCalls.push(r.call);
      }
    }
    return { content, toolCalls, malformed };
  },
  write(content, calls) {
    if (calls.length === 0) return content;
    // The JSON-array form (tokenizer v3: Mistral 7B v0.3, Nemo); with a call whose arguments are
    // not an object, the per-call form (v11), so that call alone reads as malformed.
    if (calls.every((c) => typeof c.arguments !== 'string')) return `${content}${TAG}[${calls.map((c) => `{"name": ${JSON.stringify(c.name)}, "arguments": ${argumentsText(c)}}`).join(', ')}]`;
    return content + calls.map((c) => `${TAG}${c.name}${ARGS}${argumentsText(c)}`).join('');
  },
};
