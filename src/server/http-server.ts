import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import { isAuthorized, isHostAllowed, isOriginAllowed } from './auth.js';
import { readJsonBody } from './body.js';
import { systemClock, type Clock } from '../clock.js';
import { HttpError, sendError, sendJson, toHttpError } from './http-error.js';
import type { Router } from './router.js';
import type { ServiceContext } from './service-context.js';

// The connection guard lives on the ground floor: the LLM engine server (a lower layer) uses it too.
export { guardConnections, type ConnectionGuard, type ConnectionLimits } from '../connection-guard.js';

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
      return sendError(res, new HttpError(405, 'METHOD_NOT_ALLOWED', `${method} is not allowed on ${url.pathname.slice(0, 200)}`, { headers: { allow: m.allow.join(', ') } }));
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
  sendError(res, new HttpError(401, 'UNAUTHORIZED', 'missing or wrong bearer token', { headers: { 'www-authenticate': 'Bearer' } }));
}
