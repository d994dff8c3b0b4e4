import type { ServerResponse } from 'node:http';
import type { z } from 'zod';
import { redactHostPaths } from './redact.js';
import { QueueFullError, RolloutError, RuntimeClosedError, TaskError, ValidationError } from '../errors.js';

/** One problem with a request: the dotted field path (`instance.data_source`) and what is wrong. */
export interface FieldIssue {
  path: string;
  message: string;
}

/**
 * An error answered as `{error: {code, message, issues}}` with an HTTP status. Route handlers throw
 * it; the server turns it (and any {@link RolloutError}) into the answer and stays healthy.
 */
export class HttpError extends Error {
  readonly status: number;
  readonly code: string;
  readonly issues: FieldIssue[];
  readonly headers: Record<string, string>;
  /** `issues`: the fields at fault (default none); `headers`: extra response headers (`retry-after`, `allow`…). */
  constructor(status: number, code: string, message: string, extra: { issues?: FieldIssue[]; headers?: Record<string, string> } = {}) {
    super(message);
    this.name = 'HttpError';
    this.status = status;
    this.code = code;
    this.issues = extra.issues ?? [];
    this.headers = extra.headers ?? {};
  }
}

/** Turns zod issues into field issues with dotted paths (`instances.3.data_source`). */
export function zodIssues(error: z.ZodError): FieldIssue[] {
  return error.issues.slice(0, 50).map((i) => ({
    path: i.path.map(String).join('.') || '(body)',
    message: i.message,
  }));
}

/** Parses `value` with `schema`, throwing a 400 {@link HttpError} naming every bad field. */
export function parseOr400<S extends z.ZodType>(schema: S, value: unknown, what = 'body'): z.infer<S> {
  const r = schema.safeParse(value);
  if (!r.success) throw new HttpError(400, 'VALIDATION', `invalid ${what}`, { issues: zodIssues(r.error) });
  return r.data;
}

/**
 * Maps anything thrown by a route onto an HTTP status: validation and task errors from submit are
 * the client's (400), a full queue is backpressure (429), a closed runtime is 503; anything else
 * is a 500 whose message is kept (it names our fault, not the client's).
 */
export function toHttpError(err: unknown): HttpError {
  if (err instanceof HttpError) return err;
  if (err instanceof ValidationError) return new HttpError(400, err.code, err.message, { issues: err.issues });
  if (err instanceof TaskError) return new HttpError(400, err.code, err.message);
  if (err instanceof QueueFullError) return new HttpError(429, err.code, err.message, { headers: { 'retry-after': '1' } });
  if (err instanceof RuntimeClosedError) return new HttpError(503, err.code, err.message);
  // Our faults' messages may name host paths (state dir, workdirs): never shown to a client (#9.9).
  if (err instanceof RolloutError) return new HttpError(500, err.code, redactHostPaths(err.message));
  return new HttpError(500, 'INTERNAL', redactHostPaths(err instanceof Error ? err.message : String(err)));
}

/** Writes a JSON answer (no-op when the connection is already gone). */
export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

/** Writes an {@link HttpError} as `{error: {code, message, issues}}`. */
export function sendError(res: ServerResponse, err: HttpError, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}): void {
  sendJson(res, err.status, { ...extra, error: { code: err.code, message: err.message, issues: err.issues } }, { ...err.headers, ...headers });
}
