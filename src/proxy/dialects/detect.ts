import type { IncomingHttpHeaders } from 'node:http';
import { DIALECTS, isObject, type DialectName, type DialectRoute } from './dialect.js';
import { ProxyRefusal } from '../openai-error.js';

const GOOGLE_PATH = /\/models\/([^/:]+):(generateContent|streamGenerateContent|countTokens)$/;

/**
 * The dialect of a request from its path (the query string ignored, as for Claude Code's
 * `/v1/messages?beta=true`), else from the `anthropic-version` header; `null` when neither says,
 * and the body must ({@link routeFromBody}). Paths are matched by their end, so a base URL with a
 * prefix (`/openai/v1/responses`) is served too.
 */
export function routeOf(path: string, query: string, headers: IncomingHttpHeaders): DialectRoute | null {
  if (path.endsWith('/chat/completions')) return { dialect: 'chat', op: 'generate' };
  if (path.endsWith('/responses')) return { dialect: 'responses', op: 'generate' };
  if (path.endsWith('/messages/count_tokens')) return { dialect: 'anthropic', op: 'count_tokens' };
  if (path.endsWith('/messages')) return { dialect: 'anthropic', op: 'generate' };
  const g = GOOGLE_PATH.exec(path);
  if (g) {
    let model: string;
    try {
      model = decodeURIComponent(g[1]!);
    } catch {
      model = g[1]!;
    }
    const verb = g[2]!;
    return { dialect: 'google', op: verb === 'countTokens' ? 'count_tokens' : 'generate', model, stream: verb === 'streamGenerateContent', sse: /(?:^|&)alt=sse(?:&|$)/.test(query) };
  }
  if (headers['anthropic-version'] !== undefined) return { dialect: 'anthropic', op: 'generate' };
  return null;
}

/**
 * The dialect of a request whose path and headers did not say, from its body's fields:
 * `contents` → google, `input` → responses, `messages` with a top-level `system` → anthropic,
 * `messages` → chat.
 * @throws ProxyRefusal 400 `unknown_dialect` naming the known dialects.
 */
export function routeFromBody(json: unknown): DialectRoute {
  let dialect: DialectName | null = null;
  if (isObject(json)) {
    if (json.contents !== undefined) dialect = 'google';
    else if (json.input !== undefined) dialect = 'responses';
    else if (json.messages !== undefined) dialect = json.system !== undefined ? 'anthropic' : 'chat';
  }
  if (!dialect) {
    throw new ProxyRefusal({ status: 400, type: 'invalid_request_error', code: 'unknown_dialect', message: `unknown API dialect: the path, the headers and the body name none of the known ones (${DIALECTS.join(', ')}: POST /v1/chat/completions, /v1/responses, /v1/messages, /v1beta/models/{model}:generateContent)` });
  }
  return { dialect, op: 'generate' };
}
