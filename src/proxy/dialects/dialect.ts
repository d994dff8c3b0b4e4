import type { ServerResponse } from 'node:http';
import type { OpenAiChatRequest } from '../../llm/openai-chat-route.js';
import type { Message, ToolSchema } from '../../protocol/messages.js';
import { ProxyRefusal } from '../openai-error.js';

/** The API dialects the per-rollout proxy speaks. */
export const DIALECTS = ['chat', 'responses', 'anthropic', 'google'] as const;
export type DialectName = (typeof DIALECTS)[number];

/** What the request line and headers said about a request, before its body is read. */
export interface DialectRoute {
  readonly dialect: DialectName;
  /** `generate`: sample an answer; `count_tokens`: only count the prompt's tokens. */
  readonly op: 'generate' | 'count_tokens';
  /** The model named in the path (Google's `models/{model}:generateContent`). */
  readonly model?: string | undefined;
  /** The path itself asks for a stream (Google's `:streamGenerateContent`). */
  readonly stream?: boolean | undefined;
  /** Google's `?alt=sse`: the stream as server-sent events rather than one JSON array. */
  readonly sse?: boolean | undefined;
}

/**
 * A request of any dialect in the one internal chat form: the conversation and tools in the
 * runtime's message form, and the few request fields the loop reads. Nothing here is dialect
 * specific except `route`, which only the dialect's own writer reads back.
 */
export interface InternalRequest {
  /**
   * The sampling fields in chat-completions form (`max_tokens`, `logprobs`, …). For the chat
   * dialect this is the validated request itself; for the others its `messages` is empty —
   * `messages` below is the conversation.
   */
  readonly body: OpenAiChatRequest;
  readonly messages: Message[];
  readonly tools: ToolSchema[];
  readonly stream: boolean;
  readonly maxTokens: number | undefined;
  /** The model name the client asked for: echoed in the answer. */
  readonly model: string | undefined;
  /** The request's switch of the chat template's thinking (`undefined`: not said). */
  readonly enableThinking: boolean | undefined;
  /** Chat's `stream_options.include_usage`: usage in a last chunk of its own. */
  readonly includeUsage?: boolean | undefined;
  readonly route: DialectRoute;
}

/** What a dialect's reader may do besides reading: note a warning, once per rollout. */
export interface ReadContext {
  warn(message: string): void;
}

/**
 * One API dialect: an adapter at the proxy's edge. It reads its request into the internal chat
 * form and writes the one internal answer (a `chat.completion` object, see {@link answerOf})
 * back in its own shape, streaming or not. It never sees tokens.
 */
export interface Dialect {
  readonly name: DialectName;
  /**
   * The request in the internal form.
   * @throws ProxyRefusal 400 naming the field and the problem, or naming the feature not served.
   */
  read(json: unknown, route: DialectRoute, ctx: ReadContext): InternalRequest;
  /** Writes the answer: JSON, or the dialect's stream. */
  write(res: ServerResponse, completion: Record<string, unknown>, req: InternalRequest): void;
  /** The body of a token count (`count_tokens` routes). */
  countBody(tokens: number): unknown;
  /** A refusal in this dialect's error shape. */
  errorBody(refusal: ProxyRefusal): unknown;
}

/** The internal answer, read once from the `chat.completion` the loop made. */
export interface InternalAnswer {
  id: string;
  content: string | null;
  /** Reasoning kept apart from the content (harmony's analysis channel). */
  reasoning: string | undefined;
  toolCalls: { id: string; name: string; arguments: string }[];
  finish: 'stop' | 'tool_calls' | 'length';
  promptTokens: number;
  outputTokens: number;
}

/** The {@link InternalAnswer} of a `chat.completion` as `chatCompletion` (src/llm/openai-chat-route.ts) makes it. */
export function answerOf(completion: Record<string, unknown>): InternalAnswer {
  const choice = (completion.choices as { message: { content: string | null; reasoning_content?: string; tool_calls?: { id: string; function: { name: string; arguments: string } }[] }; finish_reason: string }[])[0]!;
  const usage = completion.usage as { prompt_tokens: number; completion_tokens: number };
  const m = choice.message;
  return {
    id: String(completion.id),
    content: m.content,
    reasoning: m.reasoning_content,
    toolCalls: (m.tool_calls ?? []).map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments })),
    finish: choice.finish_reason === 'tool_calls' ? 'tool_calls' : choice.finish_reason === 'length' ? 'length' : 'stop',
    promptTokens: usage.prompt_tokens,
    outputTokens: usage.completion_tokens,
  };
}

/** Writes a JSON body (a no-op when the response already started). */
export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent || res.writableEnded || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, { ...headers, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)) });
  res.end(text);
}

/**
 * Writes a whole event stream at once. The engine call is token-in/token-out and not streamed, so
 * every event is known when the answer is written; a client reading the stream sees the answer it
 * would get without `stream`.
 */
export function sendEventStream(res: ServerResponse, text: string): void {
  if (res.headersSent || res.writableEnded || res.destroyed) return;
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'content-length': String(Buffer.byteLength(text)) });
  res.end(text);
}

/** A 400 in the internal form: the dialect's writer gives it its shape. */
export function badRequest(param: string | null, message: string, code = 'invalid_value'): ProxyRefusal {
  return new ProxyRefusal({ status: 400, type: 'invalid_request_error', code, message: param ? `${param}: ${message}` : message, param });
}

/** A 400 for a model feature this proxy does not serve (images, server-side tools, …). */
export function unsupported(param: string, what: string): ProxyRefusal {
  return new ProxyRefusal({ status: 400, type: 'invalid_request_error', code: 'unsupported_feature', message: `${param}: ${what} is not served by this endpoint (text and function tools only)`, param });
}

/** True for a plain JSON object. */
export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Field readers that throw a 400 naming the field. */
export const field = {
  string(v: unknown, param: string): string {
    if (typeof v !== 'string') throw badRequest(param, `expected a string, got ${kindOf(v)}`);
    return v;
  },
  optString(v: unknown, param: string): string | undefined {
    return v === undefined || v === null ? undefined : field.string(v, param);
  },
  array(v: unknown, param: string): unknown[] {
    if (!Array.isArray(v)) throw badRequest(param, `expected an array, got ${kindOf(v)}`);
    return v;
  },
  object(v: unknown, param: string): Record<string, unknown> {
    if (!isObject(v)) throw badRequest(param, `expected an object, got ${kindOf(v)}`);
    return v;
  },
  optPositiveInt(v: unknown, param: string): number | undefined {
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0) throw badRequest(param, `expected a positive integer, got ${JSON.stringify(v)?.slice(0, 40)}`);
    return v;
  },
  optNumber(v: unknown, param: string, min: number, max: number): number | undefined {
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'number' || !(v >= min && v <= max)) throw badRequest(param, `expected a number in [${min}, ${max}], got ${JSON.stringify(v)?.slice(0, 40)}`);
    return v;
  },
  optBoolean(v: unknown, param: string): boolean | undefined {
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'boolean') throw badRequest(param, `expected a boolean, got ${kindOf(v)}`);
    return v;
  },
};

function kindOf(v: unknown): string {
  return v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v;
}

/**
 * The tools read from the previous request when this one's are the same object: a body's tools
 * re-sent byte for byte come back from resent-body.ts as the previous parse's value, so they are
 * neither read again nor (being the same array) stringified again by the token record. Null
 * otherwise (also for no tools: reading none costs nothing).
 */
export function reuseTools(prev: { raw: unknown; read: ToolSchema[] } | null, raw: unknown): ToolSchema[] | null {
  return prev !== null && typeof raw === 'object' && raw !== null && raw === prev.raw ? prev.read : null;
}

/** Tool-call arguments from a JSON string or object; throws a 400 naming `param` when not an object. */
export function argumentsOf(v: unknown, param: string): Record<string, unknown> {
  if (isObject(v)) return v;
  if (typeof v === 'string') {
    if (v.trim() === '') return {};
    try {
      const j = JSON.parse(v) as unknown;
      if (isObject(j)) return j;
    } catch {
      // reported below
    }
  }
  throw badRequest(param, 'tool-call arguments are not a JSON object');
}

/** `event: name\ndata: json\n\n`. */
export function sseEvent(name: string, data: unknown): string {
  return `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
}
