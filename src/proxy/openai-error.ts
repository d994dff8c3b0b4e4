import type { ServerResponse } from 'node:http';

/**
 * An error as OpenAI's API sends it: `{"error": {"message", "type", "param", "code"}}`. OpenAI
 * clients (the `openai` package, litellm, plain `urllib` agents) read `error.message` and the
 * HTTP status; `type` and `code` let a harness tell a budget refusal from a bad request.
 */
export interface OpenAiErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

/** A refusal the proxy answers with: status plus the OpenAI-style body. */
export class ProxyRefusal extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    readonly code: string,
    message: string,
    readonly param: string | null = null,
  ) {
    super(message);
    this.name = 'ProxyRefusal';
  }

  /** The OpenAI-style body of this refusal. */
  get body(): OpenAiErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

/** Writes `refusal` as a JSON response (a no-op when the response already started). */
export function sendRefusal(res: ServerResponse, refusal: ProxyRefusal): void {
  if (res.headersSent || res.writableEnded || res.destroyed) return;
  const text = JSON.stringify(refusal.body);
  res.writeHead(refusal.status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
