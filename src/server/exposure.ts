import { BlockList, isIP } from 'node:net';

/**
 * Whether `rollout serve` may bind where it was asked to (issue #9.6). The API runs code in
 * sandboxes: bound beyond loopback with no token, anyone who can reach the port can do that. So a
 * non-loopback bind needs `--token`; `--insecure` overrides the refusal and keeps reminding.
 */

import { every, systemClock, type Clock } from '../clock.js';

/** 127.0.0.0/8 and ::1; node's BlockList also matches IPv4-mapped IPv6 (`::ffff:127.0.0.1`, `::ffff:7f00:1`) against the IPv4 rule. */
const LOOPBACK = (() => {
  const list = new BlockList();
  list.addSubnet('127.0.0.0', 8, 'ipv4');
  list.addAddress('::1', 'ipv6');
  return list;
})();

/**
 * True for an address or name that only this machine can reach: `localhost`, `127.0.0.0/8`, and
 * every spelling of `::1` or of an IPv4-mapped loopback (`0:0:0:0:0:0:0:1`, `::ffff:127.0.0.1`,
 * `::ffff:7f00:1`), bracketed or not. The one predicate behind both the token rule of
 * {@link checkExposure} and the Host pin of `auth.ts` (issue #28 §5.8: the two disagreed on
 * `::ffff:127.0.0.1`, and the pin then let any Host through).
 */
export function isLoopbackHost(host: string): boolean {
  let h = host.trim().toLowerCase();
  if (h.startsWith('[') && h.endsWith(']')) h = h.slice(1, -1);
  if (h.endsWith('.')) h = h.slice(0, -1); // the root label: `localhost.` is `localhost`
  if (h === 'localhost') return true;
  const family = isIP(h);
  if (family === 4) return LOOPBACK.check(h, 'ipv4');
  if (family === 6) return LOOPBACK.check(h, 'ipv6');
  return false;
}

/** The decision of {@link checkExposure}. */
export type ExposureDecision =
  /** Loopback, or protected by a token. */
  | { kind: 'ok' }
  /** Exposed without a token because the operator said `--insecure`: warn, and keep warning. */
  | { kind: 'insecure'; warning: string }
  /** Refused: print `reason` and exit 2. */
  | { kind: 'refused'; reason: string };

/**
 * Decides whether binding `host` is allowed. Pure: the caller prints and exits.
 * Non-loopback + no token → refused, unless `insecure` → insecure (with the warning to repeat).
 */
export function checkExposure(host: string, token: string | undefined, insecure: boolean): ExposureDecision {
  if (isLoopbackHost(host) || (token !== undefined && token !== '')) return { kind: 'ok' };
  if (insecure) {
    return {
      kind: 'insecure',
      warning: `WARNING: serving ${host} without a token (--insecure): anyone who reaches this port can run code in sandboxes on this machine`,
    };
  }
  return {
    kind: 'refused',
    reason:
      `refusing to bind ${host} without --token: this API runs code in sandboxes, and a non-loopback address serves anyone who can reach it. ` +
      'Set --token SECRET (or ROLLOUT_TOKEN), bind 127.0.0.1, or pass --insecure to accept the risk.',
  };
}

/**
 * Writes `warning` now and every `everyMs` (default one minute) until the returned stop function
 * is called: an exposed service should not be forgotten in a scroll-back.
 */
export function repeatWarning(warning: string, write: (line: string) => void, clock: Clock = systemClock, everyMs = 60_000): () => void {
  write(`${warning}\n`);
  // every() unrefs its timer: a reminder never keeps a closing process alive.
  return every(clock, everyMs, () => write(`${warning}\n`));
}
