import { toHttpError, type FieldIssue } from './http-error.js';

/** One entry of FastAPI's validation `detail`. */
export interface FastApiDetail {
  loc: (string | number)[];
  msg: string;
  type: string;
}

/** Codes of a body the route could not accept as sent: FastAPI answers those 422. */
const MALFORMED = new Set(['VALIDATION', 'INVALID_JSON', 'TOO_DEEP', 'BAD_BODY']);

/**
 * The answer of a failed ProRL route in FastAPI's shape, which the reference's clients expect
 * (REFERENCE.md §5): a malformed body is 422 `{detail: [{loc, msg, type}]}` (`loc` starts with
 * `body`), any other error keeps its status with `{detail: message}`. Our own `error` object rides
 * beside `detail`, so a client written for either reads what it knows.
 */
export function fastApiError(err: unknown): { status: number; body: unknown; headers: Record<string, string> } {
  const e = toHttpError(err);
  const error = { code: e.code, message: e.message, issues: e.issues };
  // A body refused mid-stream closes the connection, as on every route (see http-server.ts).
  const headers = e.status === 413 || e.status === 408 ? { ...e.headers, connection: 'close' } : e.headers;
  if (MALFORMED.has(e.code)) {
    const detail: FastApiDetail[] = e.issues.length
      ? e.issues.map((i) => ({ loc: loc(i), msg: i.message, type: e.code === 'VALIDATION' ? 'value_error' : 'json_invalid' }))
      : [{ loc: ['body'], msg: e.message, type: e.code === 'VALIDATION' ? 'value_error' : 'json_invalid' }];
    return { status: 422, body: { detail, error }, headers };
  }
  return { status: e.status, body: { detail: e.message, error }, headers };
}

function loc(i: FieldIssue): (string | number)[] {
  if (i.path === '(body)') return ['body'];
  return ['body', ...i.path.split('.').map((p) => (/^\d+$/.test(p) ? Number(p) : p))];
}
