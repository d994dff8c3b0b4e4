import type { ServerResponse } from 'node:http';
import type { Message, ToolCall, ToolSchema } from '../../protocol/messages.js';
import { reusedPrefix } from '../chat-request-reader.js';
import type { ProxyRefusal } from '../openai-error.js';
import { answerOf, badRequest, field, reuseTools, sendEventStream, sendJson, sseEvent, unsupported, type Dialect, type DialectRoute, type InternalRequest, type ReadContext } from './dialect.js';

/**
 * Claude Code prints a per-request billing line as the first line of its system prompt
 * (`x-anthropic-billing-header: …cch=<hash>;`); the hash changes every request, so kept it would
 * make every call's prompt differ from the last at its first tokens and no two calls would merge
 * into one sequence. Polar's gateway strips it for the same reason (gateway/transform/anthropic.py).
 */
const BILLING_LINE = /^\s*x-anthropic-billing-header:[^\n]*\n?/i;

const STOP_REASON = { stop: 'end_turn', tool_calls: 'tool_use', length: 'max_tokens' } as const;

/**
 * Anthropic Messages (`POST /v1/messages`, any query string such as Claude Code's `?beta=true`;
 * `POST /v1/messages/count_tokens`). Read: `system` (a string or text blocks), `messages` whose
 * content is a string or blocks — `text`, `tool_use` (assistant), `tool_result` (user; its
 * content a string or text blocks; `is_error` marked as Polar does), `thinking` /
 * `redacted_thinking` (dropped: reasoning is not part of the history the templates render) —
 * `tools` (custom tools; a server tool is a 400), `thinking` → the template's thinking switch,
 * `max_tokens`, `stream`. A user message's tool results become `tool` messages ahead of its text.
 * Written: a `message` with `thinking` (reasoning kept apart, harmony), `text` and `tool_use`
 * blocks and `stop_reason` `end_turn` / `tool_use` / `max_tokens`, or its stream: `message_start`,
 * per block `content_block_start` / `content_block_delta` (`thinking_delta` + `signature_delta`,
 * `text_delta`, `input_json_delta`) / `content_block_stop`, `message_delta` with the stop reason
 * and usage, `message_stop` — what `@anthropic-ai/sdk`'s `MessageStream` assembles.
 */
export class AnthropicDialect implements Dialect {
  readonly name = 'anthropic' as const;
  /**
   * The previous request's messages as sent and as read. A harness re-sends its whole history
   * each call; a message equal (as JSON) to the previous request's at the same index was read
   * then, so its messages are reused — the same objects, which the token record then compares by
   * identity — and only the rest is read (chat-request-reader.ts does the same for chat).
   */
  private prev: { raw: readonly unknown[]; read: Message[][] } | null = null;
  /** The previous request's tools as sent (resent-body.ts hands back the same object when they are re-sent unchanged) and as read. */
  private prevTools: { raw: unknown; read: ToolSchema[] } | null = null;

  read(json: unknown, route: DialectRoute, _ctx?: ReadContext): InternalRequest {
    const b = field.object(json, 'body');
    const messages: Message[] = [];
    if (b.system !== undefined && b.system !== null) {
      const system = textOf(b.system, 'system').replace(BILLING_LINE, '');
      if (system !== '') messages.push({ role: 'system', content: system });
    }
    const list = field.array(b.messages, 'messages');
    if (list.length === 0 && route.op === 'generate') throw badRequest('messages', 'at least one message is required');
    const read: Message[][] = reusedPrefix(list, this.prev);
    for (let i = read.length; i < list.length; i++) {
      const out: Message[] = [];
      readMessage(list[i], `messages.${i}`, out);
      read.push(out);
    }
    for (const group of read) for (const m of group) messages.push(m);
    const tools = reuseTools(this.prevTools, b.tools) ?? readTools(b.tools);
    if (route.op === 'generate') this.prevTools = { raw: b.tools, read: tools };
    const maxTokens = field.optPositiveInt(b.max_tokens, 'max_tokens');
    field.optNumber(b.temperature, 'temperature', 0, 1);
    field.optNumber(b.top_p, 'top_p', 0, 1);
    const model = field.optString(b.model, 'model');
    const stream = field.optBoolean(b.stream, 'stream') === true;
    let enableThinking: boolean | undefined;
    if (b.thinking !== undefined && b.thinking !== null) {
      const t = field.object(b.thinking, 'thinking');
      const type = field.string(t.type, 'thinking.type');
      if (type === 'enabled' || type === 'adaptive') enableThinking = true;
      else if (type === 'disabled') enableThinking = false;
      else throw badRequest('thinking.type', `expected enabled, adaptive or disabled, got ${JSON.stringify(type).slice(0, 40)}`);
    }
    if (route.op === 'generate') this.prev = { raw: list, read };
    return { body: { messages: [], ...(maxTokens !== undefined ? { max_tokens: maxTokens } : {}) }, messages, tools, stream, maxTokens, model, enableThinking, route };
  }

  write(res: ServerResponse, completion: Record<string, unknown>, req: InternalRequest): void {
    const a = answerOf(completion);
    const model = req.model ?? String(completion.model);
    const id = `msg_${a.id}`;
    const stopReason = STOP_REASON[a.finish];
    const blocks: Record<string, unknown>[] = [];
    if (a.reasoning !== undefined && a.reasoning !== '') blocks.push({ type: 'thinking', thinking: a.reasoning, signature: '' });
    if (a.content) blocks.push({ type: 'text', text: a.content });
    for (const c of a.toolCalls) blocks.push({ type: 'tool_use', id: c.id, name: c.name, input: JSON.parse(c.arguments) as unknown });
    const usage = { input_tokens: a.promptTokens, output_tokens: a.outputTokens, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 };
    if (!req.stream) {
      if (blocks.length === 0) blocks.push({ type: 'text', text: '' });
      return sendJson(res, 200, { id, type: 'message', role: 'assistant', model, content: blocks, stop_reason: stopReason, stop_sequence: null, usage });
    }
    let out = sseEvent('message_start', { type: 'message_start', message: { id, type: 'message', role: 'assistant', model, content: [], stop_reason: null, stop_sequence: null, usage: { ...usage, output_tokens: 0 } } });
    let index = 0;
    const block = (start: Record<string, unknown>, deltas: Record<string, unknown>[]): void => {
      out += sseEvent('content_block_start', { type: 'content_block_start', index, content_block: start });
      for (const delta of deltas) out += sseEvent('content_block_delta', { type: 'content_block_delta', index, delta });
      out += sseEvent('content_block_stop', { type: 'content_block_stop', index });
      index++;
    };
    if (a.reasoning !== undefined && a.reasoning !== '') {
      block({ type: 'thinking', thinking: '', signature: '' }, [{ type: 'thinking_delta', thinking: a.reasoning }, { type: 'signature_delta', signature: '' }]);
    }
    if (a.content || (a.toolCalls.length === 0 && index === 0)) block({ type: 'text', text: '' }, a.content ? [{ type: 'text_delta', text: a.content }] : []);
    for (const c of a.toolCalls) block({ type: 'tool_use', id: c.id, name: c.name, input: {} }, [{ type: 'input_json_delta', partial_json: c.arguments }]);
    out += sseEvent('message_delta', { type: 'message_delta', delta: { stop_reason: stopReason, stop_sequence: null }, usage: { output_tokens: a.outputTokens } });
    out += sseEvent('message_stop', { type: 'message_stop' });
    sendEventStream(res, out);
  }

  countBody(tokens: number): unknown {
    return { input_tokens: tokens };
  }

  errorBody(refusal: ProxyRefusal): unknown {
    return { type: 'error', error: { type: errorType(refusal.status), message: refusal.message } };
  }
}

/** Anthropic's error `type` for a status (docs.anthropic.com, "Errors"). */
function errorType(status: number): string {
  switch (status) {
    case 400:
    case 405:
    case 409:
    case 410:
      return 'invalid_request_error';
    case 401:
      return 'authentication_error';
    case 403:
      return 'permission_error';
    case 404:
      return 'not_found_error';
    case 413:
      return 'request_too_large';
    case 429:
      return 'rate_limit_error';
    case 503:
    case 529:
      return 'overloaded_error';
    default:
      return 'api_error';
  }
}

/** The text of a string or of text blocks (joined by newlines, as Polar does); anything else is a 400 naming it. */
function textOf(v: unknown, param: string): string {
  if (typeof v === 'string') return v;
  const list = field.array(v, param);
  let out = '';
  list.forEach((blk, i) => {
    const p = `${param}.${i}`;
    const o = field.object(blk, p);
    if (o.type !== 'text') throw nonText(o.type, `${p}.type`);
    out += (i > 0 ? '\n' : '') + field.string(o.text, `${p}.text`);
  });
  return out;
}

function nonText(type: unknown, param: string): ReturnType<typeof badRequest> {
  if (type === 'image' || type === 'document' || type === 'search_result') return unsupported(param, `the ${String(type)} block`);
  return badRequest(param, `unexpected block type ${JSON.stringify(type)?.slice(0, 60)}`);
}

function readMessage(m: unknown, p: string, out: Message[]): void {
  const o = field.object(m, p);
  const role = o.role;
  if (role !== 'user' && role !== 'assistant') throw badRequest(`${p}.role`, `expected user or assistant, got ${JSON.stringify(role)?.slice(0, 40)}`);
  if (typeof o.content === 'string') {
    out.push({ role, content: o.content });
    return;
  }
  const blocks = field.array(o.content, `${p}.content`);
  const texts: string[] = [];
  const calls: ToolCall[] = [];
  const results: Message[] = [];
  blocks.forEach((blk, i) => {
    const bp = `${p}.content.${i}`;
    const b = field.object(blk, bp);
    switch (b.type) {
      case 'text':
        texts.push(field.string(b.text, `${bp}.text`));
        return;
      case 'thinking':
      case 'redacted_thinking':
        if (role !== 'assistant') throw badRequest(`${bp}.type`, 'thinking blocks belong to assistant messages');
        return;
      case 'tool_use':
        if (role !== 'assistant') throw badRequest(`${bp}.type`, 'tool_use blocks belong to assistant messages');
        calls.push({ id: field.string(b.id, `${bp}.id`), name: field.string(b.name, `${bp}.name`), arguments: field.object(b.input ?? {}, `${bp}.input`) });
        return;
      case 'tool_result': {
        if (role !== 'user') throw badRequest(`${bp}.type`, 'tool_result blocks belong to user messages');
        const text = b.content === undefined || b.content === null ? '' : textOf(b.content, `${bp}.content`);
        const content = b.is_error === true ? (text ? `[Tool Error] ${text}` : '[Tool Error]') : text;
        results.push({ role: 'tool', content, tool_call_id: field.string(b.tool_use_id, `${bp}.tool_use_id`) });
        return;
      }
      case 'server_tool_use':
      case 'web_search_tool_result':
      case 'web_fetch_tool_result':
      case 'code_execution_tool_result':
      case 'mcp_tool_use':
      case 'mcp_tool_result':
        throw unsupported(`${bp}.type`, `a server-side tool block (${b.type})`);
      default:
        throw nonText(b.type, `${bp}.type`);
    }
  });
  if (role === 'assistant') {
    const msg: Message = { role, content: texts.join('\n') };
    if (calls.length > 0) msg.tool_calls = calls;
    out.push(msg);
    return;
  }
  // Tool results first: a chat template expects them right after the assistant turn that called.
  for (const r of results) out.push(r);
  if (texts.length > 0 || results.length === 0) out.push({ role: 'user', content: texts.join('\n') });
}

function readTools(v: unknown): ToolSchema[] {
  if (v === undefined || v === null) return [];
  return field.array(v, 'tools').map((t, i) => {
    const p = `tools.${i}`;
    const o = field.object(t, p);
    // A custom tool has no type (or `custom`); a typed one (web_search_…, bash_…, text_editor_…) runs on Anthropic's side.
    if (o.type !== undefined && o.type !== null && o.type !== 'custom') throw unsupported(`${p}.type`, `the server-side tool ${JSON.stringify(o.type).slice(0, 60)}`);
    return {
      type: 'function' as const,
      function: { name: field.string(o.name, `${p}.name`), description: field.optString(o.description, `${p}.description`) ?? '', parameters: o.input_schema === undefined ? {} : field.object(o.input_schema, `${p}.input_schema`) },
    };
  });
}
