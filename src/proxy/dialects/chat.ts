import type { ServerResponse } from 'node:http';
import { ChatRequestReader } from '../chat-request-reader.js';
import type { ProxyRefusal } from '../openai-error.js';
import { writeCompletionStream } from '../sse.js';
import { badRequest, isObject, sendJson, type Dialect, type DialectRoute, type InternalRequest, type ReadContext } from './dialect.js';

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
    const { body, messages, tools } = this.reader.read(json);
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
