import type { Message, ToolSchema } from '../protocol/messages.js';
import { HARMONY, parseHarmony } from './tool-parsers/harmony.js';

/**
 * Rendering of a chat in OpenAI's harmony format (gpt-oss), as text with its special tokens, the
 * way vLLM renders a chat request for gpt-oss (through the `openai_harmony` library, not the
 * model's Jinja template): a system message (identity, dates, reasoning effort, channels), a
 * developer message (the request's system prompt as `# Instructions`, and the tools as a
 * TypeScript-like `namespace functions`), then the turns.
 */

/** What the system message says; vLLM's defaults, the date being the day it renders. */
export interface HarmonySystem {
  reasoningEffort: 'low' | 'medium' | 'high';
  /** `YYYY-MM-DD`. */
  currentDate: string;
  /** Default `You are ChatGPT, a large language model trained by OpenAI.` (the model was trained on it). */
  modelIdentity: string;
}

export const DEFAULT_IDENTITY = 'You are ChatGPT, a large language model trained by OpenAI.';
const KNOWLEDGE_CUTOFF = '2024-06';

const msg = (header: string, content: string, end: string = HARMONY.end): string => `${HARMONY.start}${header}${HARMONY.message}${content}${end}`;

/** The system message: with function tools the `commentary` channel is offered for their calls, without them it is not. */
export function renderSystem(sys: HarmonySystem, hasFunctionTools: boolean): string {
  const channels = hasFunctionTools ? 'analysis, commentary, final' : 'analysis, final';
  let header = `# Valid channels: ${channels}. Channel must be included for every message.`;
  if (hasFunctionTools) header += "\nCalls to these tools must go to the commentary channel: 'functions'.";
  const text = [`${sys.modelIdentity}\nKnowledge cutoff: ${KNOWLEDGE_CUTOFF}\nCurrent date: ${sys.currentDate}`, `Reasoning: ${sys.reasoningEffort}`, header].join('\n\n');
  return msg('system', text);
}

/** The developer message, or '' when there are neither instructions nor tools. */
export function renderDeveloper(instructions: string | null, tools: readonly ToolSchema[]): string {
  const sections: string[] = [];
  if (instructions !== null) sections.push('# Instructions', instructions);
  if (tools.length > 0) sections.push(toolsSection(tools));
  return sections.length === 0 ? '' : msg('developer', sections.join('\n\n'));
}

/** `# Tools` with the `functions` namespace, each tool a TypeScript-like type. */
export function toolsSection(tools: readonly ToolSchema[]): string {
  const lines = ['## functions\n', 'namespace functions {\n'];
  for (const { function: f } of tools) {
    for (const line of textLines(f.description)) lines.push(`// ${line}`);
    // No parameters (an empty schema, as OpenAI clients send a tool without any): no argument.
    if (Object.keys(f.parameters).length === 0) lines.push(`type ${f.name} = () => any;\n`);
    else lines.push(`type ${f.name} = (_: ${schemaToTypescript(f.parameters, '')}) => any;\n`);
  }
  lines.push('} // namespace functions');
  return `# Tools\n\n${lines.join('\n')}`;
}

/** Rust's `str::lines`: no line for '', none for a final newline, `\r\n` ends a line too. */
function textLines(s: string): string[] {
  if (s === '') return [];
  const out = s.split('\n').map((l) => l.replace(/\r$/, ''));
  if (s.endsWith('\n')) out.pop();
  return out;
}

type Schema = Record<string, unknown>;
const isEnum = (s: Schema): boolean => Array.isArray(s.enum) && s.enum.length > 0;
const str = (v: unknown): string | null => (typeof v === 'string' ? v : null);

/** `default: "x"` for a free string, `default: x` for an enum member, JSON otherwise. */
function defaultComment(s: Schema): string | null {
  if (!('default' in s)) return null;
  const d = s.default;
  if (typeof d === 'string') return isEnum(s) ? `default: ${d}` : `default: "${d}"`;
  return `default: ${JSON.stringify(d)}`;
}

function nullable(s: Schema, t: string): string {
  return s.nullable === true && !t.includes('null') ? `${t} | null` : t;
}

/** One `oneOf` variant line's type and trailing comments. */
function variant(v: Schema, indent: string, describe: boolean, skipDesc: string | null): string {
  let out = nullable(v, schemaToTypescript(v, `${indent}   `));
  const comments: string[] = [];
  const desc = str(v.description);
  if (describe && desc !== null && desc !== skipDesc) comments.push(desc);
  const def = defaultComment(v);
  if (def !== null) comments.push(def);
  if (comments.length > 0) out += ` // ${comments.join(' ')}`;
  return out;
}

/** A JSON schema as the TypeScript-like type harmony shows the model (the harmony library's rules). */
export function schemaToTypescript(schema: Schema, indent: string): string {
  const oneOf = Array.isArray(schema.oneOf) ? (schema.oneOf as Schema[]) : null;
  if (oneOf) return oneOf.map((v) => `\n${indent} | ${variant(v, indent, true, null)}`).join('');
  if (Array.isArray(schema.type)) {
    const types = schema.type.filter((t): t is string => typeof t === 'string').map((t) => (t === 'integer' ? 'number' : t));
    if (types.length > 0) return types.join(' | ');
  }
  switch (schema.type) {
    case 'object':
      return objectType(schema, indent);
    case 'string': {
      const members = isEnum(schema) ? (schema.enum as unknown[]).filter((e): e is string => typeof e === 'string').map((e) => `"${e}"`) : [];
      return members.length > 0 ? members.join(' | ') : 'string';
    }
    case 'number':
    case 'integer':
      return 'number';
    case 'boolean':
      return 'boolean';
    case 'array':
      return schema.items && typeof schema.items === 'object' ? `${schemaToTypescript(schema.items as Schema, indent)}[]` : 'Array<any>';
    default:
      return 'any';
  }
}

function objectType(schema: Schema, indent: string): string {
  let out = '';
  const desc = str(schema.description);
  if (desc !== null) out += `${indent}// ${desc}\n`;
  out += '{\n';
  const props = schema.properties && typeof schema.properties === 'object' ? (schema.properties as Record<string, Schema>) : {};
  const required = new Set(Array.isArray(schema.required) ? schema.required.filter((r): r is string => typeof r === 'string') : []);
  for (const [key, val] of Object.entries(props)) {
    const opt = required.has(key) ? '' : '?';
    const title = str(val.title);
    if (title !== null) out += `${indent}// ${title}\n${indent}//\n`;
    const pdesc = str(val.description);
    const oneOf = Array.isArray(val.oneOf) ? (val.oneOf as Schema[]) : null;
    if (!oneOf && pdesc !== null) out += `${indent}// ${pdesc}\n`;
    if (Array.isArray(val.examples) && val.examples.length > 0) {
      out += `${indent}// Examples:\n`;
      for (const ex of val.examples) if (typeof ex === 'string') out += `${indent}// - "${ex}"\n`;
    }
    if (oneOf) {
      // The property's description above it, unless its first variant says the same.
      const above = pdesc !== null && pdesc !== str(oneOf[0]?.description);
      if (above) out += `${indent}// ${pdesc}\n`;
      const def = defaultComment(val);
      if (def !== null) out += `${indent}// ${def}\n`;
      out += `${indent}${key}${opt}:\n`;
      oneOf.forEach((v, i) => (out += `${indent} | ${variant(v, indent, !(i === 0 && above), pdesc)}\n`));
      out += `${indent},\n`;
      continue;
    }
    out += `${indent}${key}${opt}: ${nullable(val, schemaToTypescript(val, `${indent}    `))},`;
    const def = defaultComment(val);
    if (def !== null) out += ` // ${def}`;
    out += '\n';
  }
  return `${out}${indent}}`;
}

/** A tool call as vLLM renders one from chat history: recipient in the role part, content type `json`. */
function historyCall(name: string, args: string): string {
  return msg(`assistant to=functions.${name}${HARMONY.channel}commentary json`, args, HARMONY.call);
}

/**
 * The harmony messages of one chat turn of history (not the system prompt), as text. An
 * assistant turn is rendered from its content and calls (vLLM's rules: with calls, the content
 * is a commentary preamble; without, it is the final answer). `toolName` gives the name of the
 * call a tool message answers (from `tool_call_id`, else its `name`).
 */
export function renderTurn(m: Message, toolName: (m: Message) => string): string {
  switch (m.role) {
    case 'user':
      return msg('user', m.content);
    case 'system':
      return msg('system', m.content);
    case 'tool':
      return msg(`functions.${toolName(m)} to=assistant${HARMONY.channel}commentary`, m.content);
    case 'assistant':
      return assistantHistory(m.content, null, (m.tool_calls ?? []).map((c) => ({ name: c.name, args: JSON.stringify(c.arguments) })));
  }
}

/**
 * An assistant turn as vLLM renders it from chat history: without calls, the reasoning then the
 * final answer; with calls, the content as a commentary preamble, the reasoning, then each call.
 */
function assistantHistory(content: string, reasoning: string | null, calls: readonly { name: string; args: string }[]): string {
  const thought = reasoning !== null ? msg(`assistant${HARMONY.channel}analysis`, reasoning) : '';
  if (calls.length === 0) return thought + msg(`assistant${HARMONY.channel}final`, content);
  const pre = content ? msg(`assistant${HARMONY.channel}commentary`, content) : '';
  return pre + thought + calls.map((c) => historyCall(c.name, c.args)).join('');
}

/**
 * An assistant turn the model sampled (its decoded text, after the generation prompt), as vLLM
 * would render it again when the chat comes back as history: the chat response it made of the
 * turn (content, reasoning, calls with their arguments as sampled) re-rendered by
 * {@link renderTurn}'s rules, the reasoning kept unless `dropReasoning` (harmony drops the
 * chain of thought of turns before the last final answer).
 */
export function renderSampledAsHistory(sampledText: string, dropReasoning: boolean): string {
  const p = parseHarmony(sampledText);
  const calls = p.messages.filter((x) => x.recipient !== null && x.recipient.startsWith('functions.')).map((c) => ({ name: c.recipient!.slice('functions.'.length), args: c.content }));
  return assistantHistory(p.content, dropReasoning ? null : p.reasoning, calls);
}
