import type { IncomingMessage } from 'node:http';
import { HttpError } from './http-error.js';
import { systemClock, type Clock } from '../clock.js';
import { jsonDepth, stringEnd } from '../json-depth.js';

/** Limits on a request body. */
export interface BodyLimits {
  /** Bytes; larger bodies get 413 without being buffered. */
  maxBytes: number;
  /** Nesting of arrays and objects; deeper bodies get 400 before JSON.parse sees them. */
  maxDepth: number;
  /** A body not complete this long after the headers gets 408 (a trickling client cannot hold a connection forever). */
  timeoutMs: number;
}

/**
 * Reads and parses a JSON body within `limits`. An empty body is `undefined`, whatever its
 * content type. Throws {@link HttpError}: 413 over `maxBytes` (checked against Content-Length
 * first, then while streaming, so a lying client cannot make us buffer more), 415 for a
 * non-empty body whose content type is missing or not JSON,
 * 400 for malformed JSON (Python's `NaN` and `Infinity` are taken: {@link parseJsonText}) or nesting deeper than `maxDepth`, 408 when the body takes longer than
 * `timeoutMs` on `clock` (the service's one clock).
 */
export async function readJsonBody(req: IncomingMessage, limits: BodyLimits, clock: Clock = systemClock): Promise<unknown> {
  const type = req.headers['content-type'];
  // Only JSON carries a body. Refusing text/plain, forms and untyped bodies matters beyond
  // tidiness: those are what a web page may POST cross-origin without a CORS preflight
  // (`fetch(url, {mode: 'no-cors', body})`), and this API runs code in sandboxes on a machine a
  // browser's page can reach at 127.0.0.1. An EMPTY body is accepted with any type: old aiohttp
  // sends `application/octet-stream` on a bodiless `session.post(url)` (REFERENCE.md §5).
  const json = type !== undefined && JSON_TYPE.test(type);
  const declared = Number(req.headers['content-length']);
  if (!json && Number.isFinite(declared) && declared > 0) {
    drain(req);
    throw unsupported(type);
  }
  if (Number.isFinite(declared) && declared > limits.maxBytes) {
    drain(req);
    throw new HttpError(413, 'PAYLOAD_TOO_LARGE', `body of ${declared} bytes is over the limit of ${limits.maxBytes}`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  // An error emitted on the request ends the for-await below with it.
  const timer = clock.setTimeout(() => req.emit('error', new HttpError(408, 'REQUEST_TIMEOUT', `body not received within ${limits.timeoutMs} ms`)), limits.timeoutMs);
  try {
    for await (const chunk of req as AsyncIterable<Buffer>) {
      // A chunked body without a JSON type: refused at its first byte, never buffered.
      if (!json && chunk.length > 0) {
        drain(req);
        throw unsupported(type);
      }
      size += chunk.length;
      if (size > limits.maxBytes) {
        drain(req);
        throw new HttpError(413, 'PAYLOAD_TOO_LARGE', `body is over the limit of ${limits.maxBytes} bytes`);
      }
      chunks.push(chunk);
    }
  } catch (err) {
    if (err instanceof HttpError) throw err;
    throw new HttpError(400, 'BAD_BODY', `could not read the body: ${(err as Error).message}`);
  } finally {
    clock.clearTimeout(timer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') return undefined;
  const depth = jsonDepth(text);
  if (depth > limits.maxDepth) throw new HttpError(400, 'TOO_DEEP', `JSON nesting of ${depth} is over the limit of ${limits.maxDepth}`);
  return parseJsonText(text);
}

/**
 * `JSON.parse`, also taking the non-standard constants Python's `json.dumps` writes by default
 * (#28): pandas' missing floats arrive as `NaN` and the reference (FastAPI) accepts them, so a
 * trainer's rows must not be refused here. `NaN` reads as `null` (a missing value: a sampling
 * param set to it counts as unset), `Infinity` / `-Infinity` as JavaScript's infinities (a
 * schema wanting a finite number then names the field). Standard JSON takes the fast path; the
 * rewrite runs only on text `JSON.parse` refused.
 *
 * @throws HttpError 400 INVALID_JSON for text that is not JSON even so.
 */
export function parseJsonText(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    const rewritten = pythonConstants(text);
    if (rewritten !== null) {
      try {
        return JSON.parse(rewritten);
      } catch {
        // report the first error, on the text as sent
      }
    }
    throw new HttpError(400, 'INVALID_JSON', `malformed JSON: ${(err as Error).message.slice(0, 200)}`);
  }
}

const PY_CONSTANT = /-?Infinity|NaN/y;

/**
 * The text with `NaN` → `null` and `±Infinity` → `±1e999` (which JSON.parse reads as ±Infinity)
 * outside strings, or null when it has none. One linear pass, strings skipped as in {@link jsonDepth}.
 */
function pythonConstants(text: string): string | null {
  let out = '';
  let from = 0;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 34 /* " */) {
      i = stringEnd(text, i);
      if (i < 0) return null;
    } else if (c === 78 /* N */ || c === 73 /* I */ || c === 45 /* - */) {
      PY_CONSTANT.lastIndex = i;
      const m = PY_CONSTANT.exec(text);
      if (!m) continue;
      out += text.slice(from, i) + (m[0] === 'NaN' ? 'null' : m[0] === 'Infinity' ? '1e999' : '-1e999');
      i += m[0].length - 1;
      from = i + 1;
    }
  }
  return from === 0 ? null : out + text.slice(from);
}

const JSON_TYPE = /^application\/(?:[\w.+-]*\+)?json\s*(?:;|$)/i;

function unsupported(type: string | undefined): HttpError {
  return new HttpError(415, 'UNSUPPORTED_MEDIA_TYPE', `a request body needs content-type application/json, got ${type === undefined ? 'none' : type.slice(0, 100)}`);
}

/** Discards the rest of a request we refused, keeping the socket usable for the answer. */
function drain(req: IncomingMessage): void {
  req.resume();
}
