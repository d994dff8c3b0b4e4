import { argumentsText, joinTurn, parseJson, splitBlocks, toToolCall, type ToolParser } from './tool-parser.js';

/**
 * Hermes / Qwen2.5 / Qwen3: `<tool_call>{"name": .., "arguments": {..}}</tool_call>`, several
 * per turn. A block whose JSON does not parse, lacks a string `name`, has non-object
 * `arguments`, or is never closed is malformed.
 */
export const hermesParser: ToolParser = {
  name: 'hermes',
  parse(text) {
    return splitBlocks(text, '<tool_call>', '</tool_call>', (inner) => {
      const j = parseJson(inner.trim());
      return 'error' in j ? j : toToolCall(j.value);
    });
  },
  write(content, calls) {
    // As Qwen3's template renders a turn: the text, then one block per call on its own lines.
    return joinTurn(content, '\n', calls.map((c) => `<tool_call>\n{"name": ${JSON.stringify(c.name)}, "arguments": ${argumentsText(c)}}\n</tool_call>`).join('\n'));
  },
};
