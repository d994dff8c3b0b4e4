import { chatMessagesOf, OpenAiChatRequestSchema, type OpenAiChatRequest } from '../llm/openai-chat-route.js';
import type { Message, ToolSchema } from '../protocol/messages.js';
import { ProxyRefusal } from './openai-error.js';

/** A chat request as the proxy hands it on: validated, and its conversation in the runtime's form. */
export interface ReadChatRequest {
  body: OpenAiChatRequest;
  messages: Message[];
  tools: ToolSchema[];
}

/**
 * Validates a rollout's chat requests (the zod schema, then the runtime's message form) without
 * redoing the history each time. A harness re-sends its whole conversation with every request,
 * so validating all of it made each call O(history) in allocation-heavy work (zod copies every
 * message; ~0.4 ms per call at ~300 turns, profiled by bench/proxy-profile.ts). A message equal,
 * as a JSON value, to the previous request's at the same index was validated and converted then:
 * it is reused, and only the rest goes through the schema. Answers and errors are the same as
 * validating the whole request (an error's `param` and message name the index in the request).
 */
export class ChatRequestReader {
  private prev: { raw: readonly unknown[]; body: OpenAiChatRequest['messages']; messages: Message[] } | null = null;
  /**
   * The previous request's tools as sent, validated and converted: tools re-sent byte for byte
   * come back from resent-body.ts as the same object, and then skip the schema (zod copies every
   * tool's JSON schema: tens of KB for the CLIs) and the conversion.
   */
  private prevTools: { raw: unknown; body: OpenAiChatRequest['tools']; tools: ToolSchema[] } | null = null;

  /** @throws ProxyRefusal 400 naming the field and the problem. */
  read(json: unknown): ReadChatRequest {
    const raw = json !== null && typeof json === 'object' && !Array.isArray(json) ? (json as { messages?: unknown }).messages : undefined;
    let k = 0;
    const prev = this.prev;
    if (prev && Array.isArray(raw)) {
      // At least one message is validated, so the schema's `min(1)` and the shape checks still run.
      const n = Math.min(raw.length - 1, prev.raw.length);
      while (k < n && jsonEqual(raw[k], prev.raw[k])) k++;
    }
    const rawTools = raw !== undefined ? (json as { tools?: unknown }).tools : undefined;
    const pt = this.prevTools;
    const sameTools = pt !== null && typeof rawTools === 'object' && rawTools !== null && rawTools === pt.raw;
    const tail = k > 0 || sameTools ? { ...(json as object), messages: k > 0 ? (raw as unknown[]).slice(k) : raw, ...(sameTools ? { tools: undefined } : {}) } : json;
    const parsed = OpenAiChatRequestSchema.safeParse(tail);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      const path = issue.path.map((p, i) => (i === 1 && issue.path[0] === 'messages' && typeof p === 'number' ? p + k : p));
      const param = path.map(String).join('.') || null;
      throw new ProxyRefusal({ status: 400, type: 'invalid_request_error', code: 'invalid_value', message: `${param ?? 'body'}: ${issue.message}`, param });
    }
    let conv: { messages: Message[]; tools: ToolSchema[] };
    try {
      conv = chatMessagesOf(parsed.data, k);
    } catch (err) {
      throw new ProxyRefusal({ status: 400, type: 'invalid_request_error', code: 'invalid_value', message: (err as Error).message, param: 'messages' });
    }
    const body = parsed.data;
    if (sameTools) {
      body.tools = pt.body;
      conv.tools = pt.tools;
    }
    this.prevTools = { raw: rawTools, body: body.tools, tools: conv.tools };
    let messages = conv.messages;
    if (k > 0) {
      body.messages = prev!.body.slice(0, k).concat(body.messages);
      messages = prev!.messages.slice(0, k).concat(messages);
    }
    this.prev = { raw: raw as unknown[], body: body.messages, messages };
    return { body, messages, tools: conv.tools };
  }
}

/**
 * Equality of two parsed JSON values (objects by their own keys, arrays in order). Runs over the
 * whole re-sent history on every request, so it allocates nothing: `Object.keys` of both sides
 * of every message was the largest part of the proxy's own garbage per call (V8's sampling heap
 * profiler over bench/proxy-profile.ts's path; docs/proxy.md).
 */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!jsonEqual(a[i], b[i])) return false;
    return true;
  }
  if (Array.isArray(b)) return false;
  const x = a as Record<string, unknown>;
  const y = b as Record<string, unknown>;
  let keys = 0;
  for (const key in x) {
    if (!Object.hasOwn(x, key)) continue;
    keys++;
    if (!Object.hasOwn(y, key) || !jsonEqual(x[key], y[key])) return false;
  }
  for (const key in y) if (Object.hasOwn(y, key)) keys--;
  return keys === 0;
}

/**
 * What an agent re-sent unchanged from its previous request, already read: the read forms of the
 * longest prefix of `list` equal (as JSON) to `prev.raw`, so a dialect reads only the new items.
 */
export function reusedPrefix<T>(list: readonly unknown[], prev: { raw: readonly unknown[]; read: readonly T[] } | null): T[] {
  const read: T[] = [];
  if (!prev) return read;
  const n = Math.min(list.length, prev.raw.length);
  while (read.length < n && jsonEqual(list[read.length], prev.raw[read.length])) read.push(prev.read[read.length]!);
  return read;
}
