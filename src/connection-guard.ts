import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { systemClock, unref, type Clock, type TimerHandle } from './clock.js';

/** Limits of {@link guardConnections}. */
export interface ConnectionLimits {
  /**
   * How long a connection may sit without a request in progress: from accept to the end of its
   * first request's headers, and between requests on a kept-alive connection. Then it is closed.
   */
  idleMs: number;
  /** HTTP connections held at once (WebSocket connections are counted by their own cap). */
  maxConnections: number;
  /** The process's clock (the idle timers). Default the system clock. */
  clock?: Clock | undefined;
}

/** What {@link guardConnections} reports, for metrics and tests. */
export interface ConnectionGuard {
  /** HTTP connections held now (idle and busy). */
  readonly open: number;
  /** Of those, connections with no request in progress. */
  readonly idle: number;
  /** Connections closed so far for idling past `idleMs`. */
  readonly timedOut: number;
  /** Idle connections closed so far to make room for a new one at the cap. */
  readonly evicted: number;
  /** New connections refused because the cap was reached with every connection busy. */
  readonly refused: number;
}

interface Tracked {
  active: number;
  timer: TimerHandle | null;
}

/**
 * Pre-auth connection hygiene for a node:http server (issue #28 §5.7): ~20,000 TCP connections
 * that never sent a byte were neither closed nor capped, and starved `/healthz` and `/process`.
 *
 * Every connection without a request in progress (just accepted, mid-headers — a slow loris —, or
 * kept alive between requests) is closed after `limits.idleMs`; one with a request in progress
 * (a `/process` held open for a whole rollout) is never timed out here. At `maxConnections`, a
 * new connection closes the connection that has been idle longest instead of being refused: idle
 * connections cost the attacker nothing to open, so they must not be able to keep a health check
 * or a trainer out. Only when every held connection is busy is a new one refused (closed at once).
 * A connection upgraded to a WebSocket leaves the count (the event hub caps those).
 */
export function guardConnections(server: Server, limits: ConnectionLimits): ConnectionGuard {
  const held = new Map<Socket, Tracked>();
  // Insertion order is the order connections became idle: the first is the one idle longest.
  const idle = new Set<Socket>();
  const stats = { timedOut: 0, evicted: 0, refused: 0 };
  const clock = limits.clock ?? systemClock;
  const markIdle = (sock: Socket, t: Tracked): void => {
    idle.add(sock);
    t.timer = unref(
      clock.setTimeout(() => {
        stats.timedOut++;
        sock.destroy();
      }, limits.idleMs),
    );
  };
  const release = (sock: Socket): void => {
    const t = held.get(sock);
    if (!t) return;
    if (t.timer) clock.clearTimeout(t.timer);
    held.delete(sock);
    idle.delete(sock);
  };
  server.on('connection', (sock: Socket) => {
    if (held.size >= limits.maxConnections) {
      const oldest = idle.values().next();
      if (oldest.done) {
        stats.refused++;
        sock.destroy();
        return;
      }
      stats.evicted++;
      release(oldest.value);
      oldest.value.destroy();
    }
    const t: Tracked = { active: 0, timer: null };
    held.set(sock, t);
    markIdle(sock, t);
    sock.once('close', () => release(sock));
  });
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const sock = req.socket;
    const t = held.get(sock);
    if (!t) return;
    t.active++;
    if (t.timer) clock.clearTimeout(t.timer);
    t.timer = null;
    idle.delete(sock);
    res.once('close', () => {
      t.active--;
      if (t.active === 0 && held.has(sock) && !sock.destroyed) markIdle(sock, t);
    });
  });
  server.on('upgrade', (req: IncomingMessage) => release(req.socket));
  return {
    get open() {
      return held.size;
    },
    get idle() {
      return idle.size;
    },
    get timedOut() {
      return stats.timedOut;
    },
    get evicted() {
      return stats.evicted;
    },
    get refused() {
      return stats.refused;
    },
  };
}
