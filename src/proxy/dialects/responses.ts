import type { ServerResponse } from 'node:http';
import type { Message, ToolCall, ToolSchema } from '../../protocol/messages.js';
import { reusedPrefix } from '../chat-request-reader.js';
import type { ProxyRefusal } from '../openai-error.js';
import { answerOf, argumentsOf, badRequest, field, reuseTools, sendEventStream, sendJson, sseEvent, unsupported, type Dialect, type DialectRoute, type InternalAnswer, type InternalRequest, type ReadContext } from './dialect.js';

/**
 * OpenAI Responses (`POST /v1/responses`, what `codex exec` speaks). Read: `instructions` (a
 * system message first), `input` (a string, or items: messages of role user / system / developer
 * (→ system) / assistant with `input_text` / `output_text` parts, `function_call` (joined to the
 * assistant message before it, as one turn's calls), `function_call_output` (a `tool` message
 * linked by `call_id`), `reasoning` (dropped: not part of the rendered history)), `tools` of type
 * `function` — tools of other types (`web_search`, `local_shell`, `custom`, …) run on OpenAI's side
 * and are ignored with one warning per rollout — `max_output_tokens`, `stream`. An image or file
 * part, `previous_response_id` (we keep no responses) or an unknown item type is a 400.
 * Written: a `response` whose `output` has a `reasoning` item (reasoning kept apart, harmony), a
 * `message` item with one `output_text` part and a `function_call` item per call (`call_id` the
 * call's id), `status` `completed` (or `incomplete` with `max_output_tokens` when cut), or its
 * stream as the SDK's `ResponseStream` accumulates it: `response.created`, `response.in_progress`,
 * per item `response.output_item.added`, its parts and deltas (`response.content_part.added`,
 * `response.output_text.delta` / `.done`, `response.content_part.done`;
 * `response.function_call_arguments.delta` / `.done`; `response.reasoning_text.delta` / `.done`),
 * `response.output_item.done`, then `response.completed` (or `response.incomplete`) with usage.
 */
export class ResponsesDialect implements Dialect {
  readonly name = 'responses' as const;
  /**
   * The previous request's input items as sent and as read: an item equal (as JSON) to the
   * previous request's at the same index is not read again (Codex re-sends its whole history each
   * call; chat-request-reader.ts does the same for chat).
   */
  private prev: { raw: readonly unknown[]; read: Fragment[] } | null = null;
  /** The previous request's tools as sent and as read (see `reuseTools`); a tool type not served was warned about then. */
  private prevTools: { raw: unknown; read: ToolSchema[] } | null = null;

  read(json: unknown, route: DialectRoute, ctx: ReadContext): InternalRequest {
    const b = field.object(json, 'body');
    if (b.previous_response_id !== undefined && b.previous_response_id !== null) {
      throw unsupported('previous_response_id', 'continuing a stored response (send the whole conversation in `input`, with store: false)');
    }
    const messages: Message[] = [];
    const instructions = field.optString(b.instructions, 'instructions');
    if (instructions) messages.push({ role: 'system', content: instructions });
    if (typeof b.input === 'string') messages.push({ role: 'user', content: b.input });
    else {
      const list = field.array(b.input, 'input');
      const read: Fragment[] = reusedPrefix(list, this.prev);
      for (let i = read.length; i < list.length; i++) read.push(readItem(list[i], `input.${i}`));
      assemble(read, messages);
      this.prev = { raw: list, read };
    }
    if (messages.length === 0) throw badRequest('input', 'the conversation is empty');
    const tools: ToolSchema[] = reuseTools(this.prevTools, b.tools) ?? [];
    if (b.tools !== undefined && b.tools !== null && tools !== this.prevTools?.read) {
      field.array(b.tools, 'tools').forEach((t, i) => {
        const o = field.object(t, `tools.${i}`);
        if (o.type !== 'function') {
          ctx.warn(`responses: tools of type ${JSON.stringify(o.type)?.slice(0, 60)} are not served and were left out of the prompt`);
          return;
        }
        tools.push({ type: 'function', function: { name: field.string(o.name, `tools.${i}.name`), description: field.optString(o.description, `tools.${i}.description`) ?? '', parameters: o.parameters === undefined || o.parameters === null ? {} : field.object(o.parameters, `tools.${i}.parameters`) } });
      });
    }
    this.prevTools = { raw: b.tools, read: tools };
    const maxTokens = field.optPositiveInt(b.max_output_tokens, 'max_output_tokens');
    field.optNumber(b.temperature, 'temperature', 0, 2);
    field.optNumber(b.top_p, 'top_p', 0, 1);
    const stream = field.optBoolean(b.stream, 'stream') === true;
    const model = field.optString(b.model, 'model');
    const reasoning = b.reasoning;
    const effort = typeof reasoning === 'object' && reasoning !== null ? (reasoning as { effort?: unknown }).effort : undefined;
    const body = { messages: [], ...(maxTokens !== undefined ? { max_tokens: maxTokens } : {}), ...(effort === 'low' || effort === 'medium' || effort === 'high' ? { reasoning_effort: effort } : {}) } as InternalRequest['body'];
    return { body, messages, tools, stream, maxTokens, model, enableThinking: undefined, route };
  }

  write(res: ServerResponse, completion: Record<string, unknown>, req: InternalRequest): void {
    const a = answerOf(completion);
    const model = req.model ?? String(completion.model);
    const id = `resp_${a.id}`;
    const items = outputItems(a);
    const cut = a.finish === 'length';
    const usage = { input_tokens: a.promptTokens, input_tokens_details: { cached_tokens: 0 }, output_tokens: a.outputTokens, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: a.promptTokens + a.outputTokens };
    const response = (status: string, output: unknown[], withUsage: boolean): Record<string, unknown> => ({
      id,
      object: 'response',
      created_at: 0,
      status,
      error: null,
      incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
      instructions: null,
      max_output_tokens: req.maxTokens ?? null,
      model,
      output,
      parallel_tool_calls: true,
      tool_choice: 'auto',
      tools: [],
      usage: withUsage ? usage : null,
    });
    const final = cut ? 'incomplete' : 'completed';
    if (!req.stream) return sendJson(res, 200, response(final, items, true));
    let seq = 0;
    let out = '';
    const ev = (type: string, data: Record<string, unknown>): void => {
      out += sseEvent(type, { type, sequence_number: seq++, ...data });
    };
    ev('response.created', { response: response('in_progress', [], false) });
    ev('response.in_progress', { response: response('in_progress', [], false) });
    items.forEach((item, output_index) => {
      const item_id = item.id;
      if (item.type === 'message') {
        const text = (item.content as { text: string }[])[0]!.text;
        ev('response.output_item.added', { output_index, item: { ...item, status: 'in_progress', content: [] } });
        const part = { type: 'output_text', text: '', annotations: [] };
        ev('response.content_part.added', { item_id, output_index, content_index: 0, part });
        ev('response.output_text.delta', { item_id, output_index, content_index: 0, delta: text, logprobs: [] });
        ev('response.output_text.done', { item_id, output_index, content_index: 0, text, logprobs: [] });
        ev('response.content_part.done', { item_id, output_index, content_index: 0, part: { ...part, text } });
      } else if (item.type === 'function_call') {
        ev('response.output_item.added', { output_index, item: { ...item, status: 'in_progress', arguments: '' } });
        ev('response.function_call_arguments.delta', { item_id, output_index, delta: item.arguments });
        ev('response.function_call_arguments.done', { item_id, output_index, name: item.name, arguments: item.arguments });
      } else {
        const text = (item.content as { text: string }[])[0]!.text;
        ev('response.output_item.added', { output_index, item: { ...item, content: [] } });
        ev('response.content_part.added', { item_id, output_index, content_index: 0, part: { type: 'reasoning_text', text: '' } });
        ev('response.reasoning_text.delta', { item_id, output_index, content_index: 0, delta: text });
        ev('response.reasoning_text.done', { item_id, output_index, content_index: 0, text });
        ev('response.content_part.done', { item_id, output_index, content_index: 0, part: { type: 'reasoning_text', text } });
      }
      ev('response.output_item.done', { output_index, item });
    });
    ev(cut ? 'response.incomplete' : 'response.completed', { response: response(final, items, true) });
    sendEventStream(res, out);
  }

  countBody(tokens: number): unknown {
    return { object: 'response.input_tokens', input_tokens: tokens };
  }

  errorBody(refusal: ProxyRefusal): unknown {
    return refusal.body;
  }
}

type OutputItem = Record<string, unknown> & { id: string; type: 'message' | 'function_call' | 'reasoning' };

/** The answer's output items: reasoning (when kept apart), the message (when it has text), each call. */
function outputItems(a: InternalAnswer): OutputItem[] {
  const items: OutputItem[] = [];
  if (a.reasoning) items.push({ id: `rs_${a.id}`, type: 'reasoning', summary: [], content: [{ type: 'reasoning_text', text: a.reasoning }] });
  if (a.content) items.push({ id: `msg_${a.id}`, type: 'message', status: 'completed', role: 'assistant', content: [{ type: 'output_text', text: a.content, annotations: [], logprobs: [] }] });
  a.toolCalls.forEach((c, i) => items.push({ id: `fc_${a.id}_${i}`, type: 'function_call', status: 'completed', call_id: c.id, name: c.name, arguments: c.arguments }));
  if (items.length === 0) items.push({ id: `msg_${a.id}`, type: 'message', status: 'completed', role: 'assistant', content: [{ type: 'output_text', text: '', annotations: [], logprobs: [] }] });
  return items;
}

/** The text of a message's content: a string, or `input_text` / `output_text` / `refusal` parts joined by newlines. */
function textOf(v: unknown, param: string): string {
  if (typeof v === 'string') return v;
  const parts = field.array(v, param);
  let out = '';
  parts.forEach((part, i) => {
    const p = `${param}.${i}`;
    const o = field.object(part, p);
    let text: string;
    if (o.type === 'input_text' || o.type === 'output_text' || o.type === 'text') text = field.string(o.text, `${p}.text`);
    else if (o.type === 'refusal') text = field.string(o.refusal, `${p}.refusal`);
    else if (o.type === 'input_image' || o.type === 'input_file' || o.type === 'input_audio') throw unsupported(`${p}.type`, `the ${String(o.type)} part`);
    else throw badRequest(`${p}.type`, `unexpected content part type ${JSON.stringify(o.type)?.slice(0, 60)}`);
    out += (i > 0 ? '\n' : '') + text;
  });
  return out;
}

/** What one input item contributes: a message, a call of the assistant turn it follows, or nothing. */
type Fragment = { message: Message } | { call: ToolCall } | null;

/**
 * The messages of the read items. A turn's calls follow its message (or each other) as items of
 * their own: they join the assistant message before them — as a new object, since a reused
 * message from the previous request must stay as it was.
 */
function assemble(read: readonly Fragment[], out: Message[]): void {
  for (const f of read) {
    if (f === null) continue;
    if ('message' in f) {
      out.push(f.message);
      continue;
    }
    const last = out.at(-1);
    if (last && last.role === 'assistant') out[out.length - 1] = { ...last, tool_calls: [...(last.tool_calls ?? []), f.call] };
    else out.push({ role: 'assistant', content: '', tool_calls: [f.call] });
  }
}

function readItem(item: unknown, p: string): Fragment {
  const o = field.object(item, p);
  const type = o.type ?? 'message';
  switch (type) {
    case 'message': {
      const role = o.role;
      if (role !== 'user' && role !== 'assistant' && role !== 'system' && role !== 'developer') throw badRequest(`${p}.role`, `expected user, assistant, system or developer, got ${JSON.stringify(role)?.slice(0, 40)}`);
      return { message: { role: role === 'developer' ? 'system' : role, content: textOf(o.content, `${p}.content`) } };
    }
    case 'function_call':
      return { call: { id: field.string(o.call_id, `${p}.call_id`), name: field.string(o.name, `${p}.name`), arguments: argumentsOf(o.arguments ?? {}, `${p}.arguments`) } };
    case 'function_call_output': {
      const output = o.output;
      return { message: { role: 'tool', content: typeof output === 'string' ? output : textOf(output, `${p}.output`), tool_call_id: field.string(o.call_id, `${p}.call_id`) } };
    }
    case 'reasoning':
      return null;
    case 'web_search_call':
    case 'file_search_call':
    case 'computer_call':
    case 'computer_call_output':
    case 'code_interpreter_call':
    case 'image_generation_call':
    case 'local_shell_call':
    case 'local_shell_call_output':
    case 'mcp_call':
    case 'custom_tool_call':
    case 'custom_tool_call_output':
    case 'item_reference':
      throw unsupported(`${p}.type`, `the ${String(type)} item`);
    default:
      throw badRequest(`${p}.type`, `unknown input item type ${JSON.stringify(type)?.slice(0, 60)}`);
  }
}
