import type { ServerResponse } from 'node:http';
import { ChatRequestReader } from '../chat-request-reader.js';
import type { ProxyRefusal } from '../openai-error.js';
import { writeCompletionStream } from '../sse.js';
import { badRequest, isObject, sendJson, unsupported, type Dialect, type DialectRoute, type InternalRequest, type ReadContext } from './dialect.js';

/**
 * The request with what OpenAI's chat format allows beyond the runtime's validated form made
 * plain: `content` as an array of text parts (Qwen Code's system message with `cache_control`,
 * AI-SDK clients) becomes their texts joined by newlines, as vLLM joins them; role `developer`
 * becomes `system`. An image, audio or file part is a 400 naming it. Messages that need neither
 * are passed as they are (the reader's re-sent-history reuse compares them by value).
 */
function normalized(raw: Record<string, unknown>, json: unknown): unknown {
  const list = raw.messages;
  if (!Array.isArray(list)) return json;
  let out: unknown[] | null = null;
  for (let i = 0; i < list.length; i++) {
    const m = list[i] as unknown;
    if (!isObject(m) || (!Array.isArray(m.content) && m.role !== 'developer')) continue;
    out ??= list.slice();
    const fixed: Record<string, unknown> = { ...m };
    if (m.role === 'developer') fixed.role = 'system';
    if (Array.isArray(m.content)) {
      fixed.content = m.content
        .map((part: unknown, j: number) => {
          const p = `messages.${i}.content.${j}`;
          if (!isObject(part)) throw badRequest(p, 'expected a content part object');
          if (part.type === 'text' || part.type === 'input_text') {
            if (typeof part.text !== 'string') throw badRequest(`${p}.text`, 'expected a string');
            return part.text;
          }
          if (part.type === 'image_url' || part.type === 'input_audio' || part.type === 'file') throw unsupported(`${p}.type`, `the ${String(part.type)} part`);
          throw badRequest(`${p}.type`, `unexpected content part type ${JSON.stringify(part.type)?.slice(0, 60)}`);
        })
        .join('\n');
    }
    out[i] = fixed;
  }
  return out ? { ...raw, messages: out } : json;
}

/**
 * OpenAI Chat Completions (`POST /v1/chat/completions`): the dialect the runtime's own form is
 * modelled on, so reading is validation (chat-request-reader.ts, which reuses the re-sent
 * history's validation) and writing is the completion itself with the requested model name.
 * `stream_options.include_usage` adds the usage chunk OpenAI sends (`choices: []`).
 */
export class ChatDialect implements Dialect {
  readonly name = 'chat' as const;
  private readonly reader = new ChatRequestReader();

  read(json: unknown, route: DialectRoute, _ctx?: ReadContext): InternalRequest {
    const raw = isObject(json) ? json : {};
    const { body, messages, tools } = this.reader.read(normalized(raw, json));
    if (raw.n !== undefined && raw.n !== 1) throw badRequest('n', 'only one choice per request is sampled (n = 1)', 'unsupported_value');
    const so = raw.stream_options;
    const includeUsage = isObject(so) && so.include_usage === true;
    return {
      body,
      messages,
      tools,
      stream: raw.stream === true,
      maxTokens: body.max_completion_tokens ?? body.max_tokens,
      model: body.model,
      enableThinking: body.chat_template_kwargs?.enable_thinking,
      includeUsage,
      route,
    };
  }

  write(res: ServerResponse, completion: Record<string, unknown>, req: InternalRequest): void {
    const out = req.model !== undefined ? { ...completion, model: req.model } : completion;
    if (req.stream) writeCompletionStream(res, out, { includeUsage: req.includeUsage === true });
    else sendJson(res, 200, out);
  }

  countBody(tokens: number): unknown {
    return { object: 'token_count', input_tokens: tokens };
  }

  errorBody(refusal: ProxyRefusal): unknown {
    return refusal.body;
  }
}
