import { timingSafeEqual, createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

/**
 * Checks `Authorization: Bearer <token>` (or, for WebSocket upgrades from browsers that cannot set
 * headers, a `token` query parameter) against the configured token. Always true when no token is
 * configured. The comparison is constant-time over SHA-256 digests, so neither the content nor the
 * length of the token leaks through timing.
 */
export function isAuthorized(req: IncomingMessage, token: string | undefined, url?: URL): boolean {
  if (token === undefined || token === '') return true;
  const header = req.headers.authorization;
  let given: string | null = null;
  if (typeof header === 'string') {
    const m = /^Bearer\s+(.+)$/i.exec(header.trim());
    if (m) given = m[1]!;
  }
  if (given === null && url) given = url.searchParams.get('token');
  if (given === null) return false;
  return timingSafeEqual(digest(given), digest(token));
}

function digest(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

const LOOPBACK = /^(?:localhost|127(?:\.\d{1,3}){3}|\[?::1\]?)$/i;

/**
 * Guards a loopback-bound service without a token against DNS rebinding: a page on a hostile
 * domain that resolves to 127.0.0.1 is same-origin to the browser, but its requests carry that
 * domain in `Host`. So when bound to loopback with no token, only loopback host names are served.
 * Always true when a token is set or the service is bound elsewhere (the operator chose exposure).
 */
export function isHostAllowed(req: IncomingMessage, bindHost: string, token: string | undefined): boolean {
  if (token || !LOOPBACK.test(bindHost)) return true;
  const host = req.headers.host;
  if (!host) return true; // HTTP/1.0 clients; browsers always send Host
  const name = host.startsWith('[') ? host.slice(0, host.indexOf(']') + 1) : host.replace(/:\d+$/, '');
  return LOOPBACK.test(name);
}
