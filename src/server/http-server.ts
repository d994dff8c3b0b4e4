import type { IncomingMessage, RequestListener, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { isAuthorized, isHostAllowed, isOriginAllowed } from './auth.js';
import { readJsonBody } from './body.js';
import { systemClock, type Clock } from '../runtime/clock.js';
import { HttpError, sendError, sendJson, toHttpError } from './http-error.js';
import type { Router } from './router.js';
import type { ServiceContext } from './service-context.js';

/**
 * The visualizer's static-file handler, mounted under `/visualizer`: answers true when it wrote
 * the response. (src/server/visualizer-assets.ts exports `serveVisualizer` with this shape.)
 */
export type VisualizerHook = (req: IncomingMessage, res: ServerResponse) => boolean;

/**
 * The node:http request listener: routing, bearer-token check, body limits, and one error shape
 * for everything. A handler that throws never takes the server down: the error is answered as
 * `{error: {code, message, issues}}` with the status of {@link toHttpError}.
 */
export function createRequestListener(service: ServiceContext, router: Router, visualizer?: VisualizerHook, clock: Clock = systemClock): RequestListener {
  const limits = { maxBytes: service.options.bodyLimitBytes, maxDepth: service.options.maxJsonDepth, timeoutMs: service.options.bodyTimeoutMs };
  return (req, res) => {
    let label = 'unmatched';
    res.on('finish', () => service.metrics.httpRequests.inc({ route: label, status: String(res.statusCode) }));
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'http://localhost');
    } catch {
      return sendError(res, new HttpError(400, 'BAD_URL', 'malformed request URL'));
    }
    const method = req.method ?? 'GET';
    if (!isHostAllowed(req, service.options.host, service.options.token)) {
      req.resume();
      return sendError(res, new HttpError(403, 'FORBIDDEN_HOST', 'this service answers loopback host names only (set a token to serve others)'));
    }
    if (!isOriginAllowed(req, service.options.token, url)) {
      req.resume();
      return sendError(res, new HttpError(403, 'FORBIDDEN_ORIGIN', 'cross-site request refused: Origin is not this service (present the bearer token to allow it)'));
    }
    if (visualizer && (url.pathname === '/visualizer' || url.pathname.startsWith('/visualizer/'))) {
      label = '/visualizer';
      // Open without the token, as /healthz is: the page, its scripts, styles and the machine's
      // graph are the package's own static files and hold no data. A browser sends no token with
      // the <script>/<link> requests of `/visualizer/?token=…` (issue #28 §5.8: with --token the
      // page could not load its own JS and CSS); every call the page makes for data goes to the
      // API and the WebSocket with the token.
      try {
        if (visualizer(req, res)) return;
      } catch (err) {
        return sendError(res, toHttpError(err));
      }
    }
    const m = router.match(method === 'HEAD' ? 'GET' : method, url.pathname);
    if (m.kind === 'not-found') {
      req.resume();
      return sendError(res, new HttpError(404, 'NOT_FOUND', `no route ${method} ${url.pathname.slice(0, 200)}`));
    }
    if (m.kind === 'method-not-allowed') {
      req.resume();
      return sendError(res, new HttpError(405, 'METHOD_NOT_ALLOWED', `${method} is not allowed on ${url.pathname.slice(0, 200)}`, [], { allow: m.allow.join(', ') }));
    }
    label = m.route.path;
    if (!m.route.open && !isAuthorized(req, service.options.token, url)) {
      req.resume();
      return unauthorized(res);
    }
    Promise.resolve()
      .then(() => m.route.handler({ req, res, url, params: m.params, body: () => readJsonBody(req, limits, clock) }))
      .then(
        (answer) => {
          if (answer) sendJson(res, answer.status, answer.body, answer.headers);
        },
        (err: unknown) => {
          const e = toHttpError(err);
          // A connection whose body we refused mid-stream (too large, too slow) is closed after
          // the answer, so the client stops sending and the rest is never buffered.
          sendError(res, e, {}, e.status === 413 || e.status === 408 ? { connection: 'close' } : {});
        },
      );
  };
}

function unauthorized(res: ServerResponse): void {
  sendError(res, new HttpError(401, 'UNAUTHORIZED', 'missing or wrong bearer token', [], { 'www-authenticate': 'Bearer' }));
}

/** Limits of {@link guardConnections}. */
export interface ConnectionLimits {
  /**
   * How long a connection may sit without a request in progress: from accept to the end of its
   * first request's headers, and between requests on a kept-alive connection. Then it is closed.
   */
  idleMs: number;
  /** HTTP connections held at once (WebSocket connections are counted by their own cap). */
  maxConnections: number;
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
  timer: NodeJS.Timeout | null;
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
  const markIdle = (sock: Socket, t: Tracked): void => {
    idle.add(sock);
    t.timer = setTimeout(() => {
      stats.timedOut++;
      sock.destroy();
    }, limits.idleMs);
    t.timer.unref();
  };
  const release = (sock: Socket): void => {
    const t = held.get(sock);
    if (!t) return;
    if (t.timer) clearTimeout(t.timer);
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
    if (t.timer) clearTimeout(t.timer);
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
