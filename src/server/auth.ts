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
