import type { IncomingMessage, ServerResponse } from 'node:http';

/** What a route handler gets. */
export interface RouteRequest {
  req: IncomingMessage;
  res: ServerResponse;
  url: URL;
  /** `:name` segments of the matched path, URI-decoded. */
  params: Record<string, string>;
  /** Reads the JSON body within the service's limits (see body.ts). */
  body(): Promise<unknown>;
}

/** A JSON answer; a handler that wrote the response itself returns `undefined`. */
export interface RouteAnswer {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}

/** Handles one matched request: answers JSON, or writes the response itself and answers undefined. Throws HttpError / RolloutError for error answers. */
export type RouteHandler = (r: RouteRequest) => Promise<RouteAnswer | undefined> | RouteAnswer | undefined;

/** One route. `open` routes skip the bearer-token check. */
export interface Route {
  method: 'GET' | 'POST' | 'DELETE' | 'PUT';
  path: string;
  handler: RouteHandler;
  open?: boolean;
}

interface Compiled extends Route {
  re: RegExp;
  names: string[];
}

/** The outcome of matching a request. */
export type Match =
  | { kind: 'found'; route: Route; params: Record<string, string> }
  | { kind: 'method-not-allowed'; allow: string[] }
  | { kind: 'not-found' };

/**
 * A method + path table. Paths are literal with `:name` segments. A path that exists under
 * another method is a 405 (with `Allow`), not a 404. Linear in the number of routes (a few dozen).
 */
export class Router {
  private readonly routes: Compiled[] = [];

  add(route: Route): this {
    const names: string[] = [];
    const pattern = route.path
      .split('/')
      .map((seg) => {
        if (seg.startsWith(':')) {
          names.push(seg.slice(1));
          return '([^/]+)';
        }
        return seg.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      })
      .join('/');
    this.routes.push({ ...route, re: new RegExp(`^${pattern}$`), names });
    return this;
  }

  /** Every route, for the OpenAPI document and tests. */
  list(): readonly Route[] {
    return this.routes;
  }

  match(method: string, path: string): Match {
    const allow: string[] = [];
    for (const r of this.routes) {
      const m = r.re.exec(path);
      if (!m) continue;
      if (r.method !== method) {
        allow.push(r.method);
        continue;
      }
      const params: Record<string, string> = {};
      r.names.forEach((n, i) => {
        params[n] = safeDecode(m[i + 1]!);
      });
      return { kind: 'found', route: r, params };
    }
    return allow.length > 0 ? { kind: 'method-not-allowed', allow } : { kind: 'not-found' };
  }
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}
