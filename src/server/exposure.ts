/**
 * Whether `rollout serve` may bind where it was asked to (issue #9.6). The API runs code in
 * sandboxes: bound beyond loopback with no token, anyone who can reach the port can do that. So a
 * non-loopback bind needs `--token`; `--insecure` overrides the refusal and keeps reminding.
 */

import { every, systemClock, type Clock } from '../clock.js';

const LOOPBACK_NAMES = /^(?:localhost|127(?:\.\d{1,3}){3}|::1|\[::1\]|0:0:0:0:0:0:0:1|::ffff:127(?:\.\d{1,3}){3})$/i;

/** True for an address or name that only this machine can reach (`127.0.0.0/8`, `::1`, `localhost`). */
export function isLoopbackHost(host: string): boolean {
  return LOOPBACK_NAMES.test(host.trim());
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
