import { timingSafeEqual, createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { isLoopbackHost } from './exposure.js';

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

/**
 * Guards a loopback-bound service without a token against DNS rebinding: a page on a hostile
 * domain that resolves to 127.0.0.1 is same-origin to the browser, but its requests carry that
 * domain in `Host`. So when bound to loopback with no token, only loopback host names are served.
 * Always true when a token is set or the service is bound elsewhere (the operator chose exposure).
 * "Loopback" is {@link isLoopbackHost}, the same predicate that decides whether a bind needs a
 * token, for the bind address and for the `Host` name alike.
 */
export function isHostAllowed(req: IncomingMessage, bindHost: string, token: string | undefined): boolean {
  if (token || !isLoopbackHost(bindHost)) return true;
  const host = req.headers.host;
  if (!host) return true; // HTTP/1.0 clients; browsers always send Host
  return isLoopbackHost(hostName(host));
}

/** The name part of a `Host` header: `[v6]:port` → `[v6]`, `name:port` → `name`. */
function hostName(host: string): string {
  if (host.startsWith('[')) {
    const end = host.indexOf(']');
    return end < 0 ? host : host.slice(0, end + 1);
  }
  return host.replace(/:\d*$/, '');
}

/**
 * Refuses cross-site requests (issue #9.5). A browser names the page that made a request in
 * `Origin`; a page at another origin may still *send* requests to 127.0.0.1 (`no-cors` fetches,
 * form posts, WebSocket handshakes) even though it cannot read the answers — and here sending is
 * enough to run code in a sandbox. So a request with an `Origin` is served only when that origin
 * is this service's own (scheme http/https and the same `host:port` as the `Host` header, which
 * {@link isHostAllowed} has already pinned to a loopback name on an open loopback service), or
 * when it presents the configured token (a page that holds the token is the operator's). Clients
 * that are not browsers send no `Origin` and are not affected; `Origin: null` (sandboxed frames,
 * `file:` pages) is foreign.
 */
export function isOriginAllowed(req: IncomingMessage, token: string | undefined, url?: URL): boolean {
  const origin = req.headers.origin;
  if (origin === undefined) return true;
  if (token && isAuthorized(req, token, url)) return true;
  return isSameOrigin(origin, req.headers.host);
}

/** True when `origin` is `http(s)://` + exactly `host`. */
export function isSameOrigin(origin: string, host: string | undefined): boolean {
  if (!host) return false;
  try {
    const o = new URL(origin);
    return (o.protocol === 'http:' || o.protocol === 'https:') && o.host === new URL(`${o.protocol}//${host}`).host;
  } catch {
    return false;
  }
}
