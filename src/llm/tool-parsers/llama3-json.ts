import type { ToolCall } from '../../protocol/messages.js';
import { argumentsText, parseJson, toToolCall, type MalformedToolCall, type ToolParser } from './tool-parser.js';

const PYTHON_TAG = '<|python_tag|>';

/**
 * Llama 3.1 / 3.2 JSON tool calls: the whole turn is `{"name": .., "parameters": {..}}` (or
 * `arguments`), optionally after `<|python_tag|>`, several separated by `;`. Text before a
 * `<|python_tag|>` is the turn's content (a model that says something, then calls). A turn whose
 * calls part (after the tag, or the whole turn when it starts with `{`) does not parse as such
 * calls is malformed; any other text is content, kept verbatim.
 */
export const llama3JsonParser: ToolParser = {
  name: 'llama3_json',
  parse(text) {
    const at = text.indexOf(PYTHON_TAG);
    if (at >= 0 && text.slice(0, at).trim().length > 0) {
      // Content, then the calls after the tag.
      const calls = llama3JsonParser.parse(text.slice(at));
      return { ...calls, content: text.slice(0, at).trim() };
    }
    const trimmed = text.trim();
    const tagged = trimmed.startsWith(PYTHON_TAG);
    const body = tagged ? trimmed.slice(PYTHON_TAG.length).trim() : trimmed;
    if (!tagged && !body.startsWith('{')) return { content: text, toolCalls: [], malformed: [] };
    const toolCalls: ToolCall[] = [];
    const malformed: MalformedToolCall[] = [];
    for (const part of splitTopLevel(body)) {
      const j = parseJson(part);
      const r = 'error' in j ? j : toToolCall(j.value);
      if ('error' in r) malformed.push({ raw: part, error: r.error });
      else toolCalls.push(r.call);
    }
    if (toolCalls.length === 0 && malformed.length === 0) malformed.push({ raw: body, error: 'empty tool call' });
    return { content: '', toolCalls, malformed };
  },
  write(content, calls) {
    if (calls.length === 0) return content;
    // A calls-only turn as the template writes it (bare JSON); after text, behind <|python_tag|>.
    const json = calls.map((c) => `{"name": ${JSON.stringify(c.name)}, "parameters": ${argumentsText(c)}}`).join('; ');
    return content.trim().length === 0 ? json : `${content}${PYTHON_TAG}${json}`;
  },
};

/** Splits `a; b` at semicolons outside JSON strings and brackets. */
function splitTopLevel(s: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let inStr = false;
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (inStr) {
      if (c === '\\') i++;
      else if (c === '"') inStr = false;
    } else if (c === '"') inStr = true;
    else if (c === '{' || c === '[') depth++;
    else if (c === '}' || c === ']') depth--;
    else if (c === ';' && depth === 0) {
      out.push(s.slice(start, i).trim());
      start = i + 1;
    }
  }
  out.push(s.slice(start).trim());
  return out.filter((p) => p.length > 0);
}
