import type { ServerResponse } from 'node:http';

/**
 * An error as OpenAI's API sends it: `{"error": {"message", "type", "param", "code"}}`. OpenAI
 * clients (the `openai` package, litellm, plain `urllib` agents) read `error.message` and the
 * HTTP status; `type` and `code` let a harness tell a budget refusal from a bad request.
 */
export interface OpenAiErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

/** What a {@link ProxyRefusal} is made of: the HTTP status and the OpenAI-style body's fields. */
export interface ProxyRefusalOptions {
  /** The HTTP status answered (409 and 410/429 also set `x-should-retry`: {@link sendRefusal}). */
  status: number;
  /** OpenAI's `error.type` (`invalid_request_error`, `insufficient_quota`, `server_error`). */
  type: string;
  /** OpenAI's `error.code`, ours (`rollout_ended`, `max_llm_calls`, `invalid_value`...). */
  code: string;
  message: string;
  /** The request field at fault, or null (the default). */
  param?: string | null | undefined;
}

/** A refusal the proxy answers with: status plus the OpenAI-style body. */
export class ProxyRefusal extends Error {
  readonly status: number;
  readonly type: string;
  readonly code: string;
  readonly param: string | null;

  constructor({ status, type, code, message, param = null }: ProxyRefusalOptions) {
    super(message);
    this.name = 'ProxyRefusal';
    this.status = status;
    this.type = type;
    this.code = code;
    this.param = param ?? null;
  }

  /** The OpenAI-style body of this refusal. */
  get body(): OpenAiErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

/**
 * Writes `refusal` as a JSON response (a no-op when the response already started): `body` is the
 * dialect's error shape (default OpenAI's). The official SDKs retry 409, 429 and 5xx on their own;
 * `x-should-retry` (read by `openai` and `@anthropic-ai/sdk`) says which of ours to retry: a
 * request sent while another is in flight, soon; a used-up budget or an ended rollout, never.
 */
export function sendRefusal(res: ServerResponse, refusal: ProxyRefusal, body: unknown = refusal.body): void {
  if (res.headersSent || res.writableEnded || res.destroyed) return;
  const text = JSON.stringify(body);
  const headers: Record<string, string> = { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)) };
  if (refusal.code === 'request_in_flight') Object.assign(headers, { 'x-should-retry': 'true', 'retry-after-ms': '100' });
  else if (refusal.status === 410 || (refusal.status === 429 && refusal.type === 'insufficient_quota')) headers['x-should-retry'] = 'false';
  res.writeHead(refusal.status, headers);
  res.end(text);
}
