import type { ServerResponse } from 'node:http';

/**
 * A finished chat completion (`object: "chat.completion"`) re-sent as OpenAI's stream of
 * `chat.completion.chunk` events: a role chunk, the content, each tool call (index, id, type,
 * name and its whole `arguments` in one delta), a last chunk with `finish_reason` and `usage`,
 * then `data: [DONE]`. With `includeUsage` (the request's `stream_options.include_usage`) the
 * usage goes, as OpenAI sends it, in a chunk of its own after the finish chunk, with
 * `choices: []` and `usage: null` on every other chunk. The engine call is token-in/token-out and not streamed, so the chunks are
 * written together once the turn is sampled; a client that reads a stream sees the same answer it
 * would get without `stream`.
 */
export function writeCompletionStream(res: ServerResponse, completion: Record<string, unknown>, opts: { includeUsage?: boolean } = {}): void {
  const choice = (completion.choices as Record<string, unknown>[])[0]!;
  const message = choice.message as { content: string | null; tool_calls?: { id: string; type: string; function: { name: string; arguments: string } }[] };
  const base = { id: completion.id, object: 'chat.completion.chunk', created: completion.created, model: completion.model };
  const usageNull = opts.includeUsage ? { usage: null } : {};
  const chunk = (delta: Record<string, unknown>, finish: unknown = null, extra: Record<string, unknown> = usageNull): string =>
    `data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...extra })}\n\n`;
  let out = chunk({ role: 'assistant', content: '' });
  if (message.content) out += chunk({ content: message.content });
  message.tool_calls?.forEach((c, index) => {
    out += chunk({ tool_calls: [{ index, id: c.id, type: c.type, function: { name: c.function.name, arguments: c.function.arguments } }] });
  });
  if (opts.includeUsage) {
    out += chunk({}, choice.finish_reason);
    out += `data: ${JSON.stringify({ ...base, choices: [], usage: completion.usage })}\n\n`;
  } else {
    out += chunk({}, choice.finish_reason, { usage: completion.usage });
  }
  out += 'data: [DONE]\n\n';
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'content-length': Buffer.byteLength(out) });
  res.end(out);
}
