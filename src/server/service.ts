import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { BackendInfo } from '../llm/llm-client.js';
import { ValidationError } from '../errors.js';
import { parseAddress } from './service-address.js';
import { ORACLE_URL } from '../llm/oracle-backend.js';
import { createRequestListener, guardConnections, type ConnectionGuard, type VisualizerHook } from './http-server.js';
import { ServiceMetrics } from './metrics.js';
import { nativeRoutes } from './native-routes.js';
import { tokenTextRoute } from './token-text.js';
import { openapiRoute } from './openapi.js';
import { prorlRoutes } from './prorl-routes.js';
import { weightRoutes } from './weight-routes.js';
import { forkRoutes } from './fork-routes.js';
import { bufferRoutes } from './buffer-routes.js';
import { polarRoutes, type PolarApi } from './polar/index.js';
import { Router } from './router.js';
import type { BackendRegistration, ServiceContext } from './service-context.js';
import { parseServiceOptions, type ServiceOptions, type ServiceOptionsInput } from './service-options.js';
import type { RuntimeFactory, ServiceRuntime } from './service-runtime.js';
import { WsEventHub } from './ws-events.js';
import { systemClock, type Clock } from '../clock.js';

/** What {@link createService} needs besides options. */
export interface ServiceDeps {
  /** Makes the runtime; called at `listen()` (unless `startStopped`) and on each ProRL `/start`. */
  createRuntime: RuntimeFactory;
  /** Backend addresses registered from the start (`--backend`). */
  backends?: BackendRegistration[] | undefined;
  /** Mounted under `/visualizer` when given (the visualizer's `serveVisualizer`). */
  visualizer?: VisualizerHook | undefined;
  /** Start with no runtime, as the reference server does until `/start`. Default false. */
  startStopped?: boolean | undefined;
  /** The process's clock (heartbeat timestamps, slow-client timing). Default the system clock. */
  clock?: Clock | undefined;
  /** Where operator-facing warnings go (one line each). Default: stderr. */
  warn?: ((message: string) => void) | undefined;
  /** The state dir (`--state-dir`): Polar task records persist under it. None: kept in memory only. */
  stateDir?: string | undefined;
  /** The HTTP client of Polar callbacks (tests). Default global fetch. */
  fetch?: typeof fetch | undefined;
}

/**
 * The HTTP + WebSocket service: ProRL-compatible routes, the native `/v1` API, WebSocket events,
 * Prometheus metrics. It owns one runtime at a time (a ProRL `/stop` closes it, `/start` makes a
 * new one) and the node:http server. {@link RolloutService.close} stops everything it started.
 */
export class RolloutService implements ServiceContext {
  readonly options: ServiceOptions;
  readonly metrics = new ServiceMetrics();
  readonly router = new Router();
  private current: ServiceRuntime | null = null;
  private follow: AbortController | null = null;
  private followDone: Promise<void> = Promise.resolve();
  private _epoch = 0;
  private _lastSeq = -1;
  private readonly registrations: (BackendRegistration & { appliedId?: string })[] = [];
  private lock: Promise<unknown> = Promise.resolve();
  private readonly server: Server;
  /** The HTTP connections held now, and how many were timed out, evicted or refused. */
  readonly connections: ConnectionGuard;
  private readonly hub: WsEventHub;
  private readonly polar: PolarApi;
  private closed = false;

  constructor(
    private readonly deps: ServiceDeps,
    options: ServiceOptionsInput = {},
  ) {
    this.options = parseServiceOptions(options);
    for (const b of deps.backends ?? []) {
      parseAddress(b.address); // fail fast on a bad --backend
      this.registrations.push({ ...b });
    }
    for (const r of prorlRoutes(this)) this.router.add(r);
    for (const r of nativeRoutes(this)) this.router.add(r);
    for (const r of weightRoutes(this)) this.router.add(r);
    for (const r of bufferRoutes(this)) this.router.add(r);
    this.router.add(tokenTextRoute(this));
    for (const r of forkRoutes(this)) this.router.add(r);
    this.polar = polarRoutes(this, { clock: deps.clock ?? systemClock, stateDir: deps.stateDir, fetch: deps.fetch });
    for (const r of this.polar.routes) this.router.add(r);
    this.router.add(openapiRoute(this.router));
    this.hub = new WsEventHub(this, deps.clock ?? systemClock);
    this.server = createServer(createRequestListener(this, this.router, deps.visualizer, deps.clock ?? systemClock));
    // /process is held open for a whole rollout: node's default 5-minute request timeout would
    // cut long rollouts. Headers must still arrive promptly.
    this.server.requestTimeout = 0;
    this.server.timeout = 0;
    this.server.headersTimeout = 60_000;
    // Connections that never send a request are closed and capped (#28 §5.7): http-server.ts.
    this.server.keepAliveTimeout = Math.min(5_000, this.options.connectionIdleMs);
    this.connections = guardConnections(this.server, { idleMs: this.options.connectionIdleMs, maxConnections: this.options.maxConnections });
    this.server.on('upgrade', (req, socket, head) => this.hub.handleUpgrade(req, socket, head));
    this.server.on('clientError', (_err, socket) => {
      if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
      else socket.destroy();
    });
  }

  get runtime(): ServiceRuntime | null {
    return this.current;
  }
  get epoch(): number {
    return this._epoch;
  }
  get lastSeq(): number {
    return this._lastSeq;
  }

  /**
   * Starts the runtime (unless `startStopped`) and listens. Resolves with the base URL. Rejects
   * (with everything it started closed again) when the port cannot be bound.
   */
  async listen(): Promise<string> {
    if (!this.deps.startStopped) await this.start();
    try {
      await new Promise<void>((resolve, reject) => {
        this.server.once('error', reject);
        this.server.listen(this.options.port, this.options.host, () => {
          this.server.off('error', reject);
          resolve();
        });
      });
    } catch (err) {
      // A port in use must not leave a runtime (and its sandbox hosts) running behind the error.
      await this.close();
      throw err;
    }
    return this.url;
  }

  /** `http://host:port` once listening. */
  get url(): string {
    const a = this.server.address() as AddressInfo | null;
    if (!a) throw new Error('not listening');
    const host = a.family === 'IPv6' ? `[${a.address}]` : a.address;
    return `http://${host}:${a.port}`;
  }

  start(): Promise<boolean> {
    return this.serial(async () => {
      if (this.current || this.closed) return false;
      const rt = await this.deps.createRuntime();
      this.current = rt;
      this._epoch++;
      this.metrics.setRuntime(rt);
      for (const reg of this.registrations) {
        try {
          reg.appliedId = this.apply(rt, reg)?.id;
        } catch {
          // A registration that the new runtime refuses (e.g. a duplicate id) is skipped, not fatal.
        }
      }
      const ac = new AbortController();
      this.follow = ac;
      this.followDone = this.followEvents(rt, ac.signal);
      this.hub.onRuntimeStarted();
      return true;
    });
  }

  stop(): Promise<boolean> {
    return this.serial(async () => {
      const rt = this.current;
      if (!rt) return false;
      this.current = null;
      this.hub.onRuntimeStopped();
      try {
        await rt.close({ drain: false });
      } finally {
        this.follow?.abort();
        await this.followDone;
        this.follow = null;
        this.metrics.setRuntime(null);
      }
      return true;
    });
  }

  addBackend(reg: BackendRegistration): BackendInfo | null {
    const spec = parseAddress(reg.address, reg); // validate even while stopped
    // Registering the same backend again is a no-op: ProRL trainers call /add_llm_server for
    // every server at each start-up, also against a service that already has them.
    const same = (r: BackendRegistration): boolean => {
      const other = parseAddress(r.address, r);
      return other.url === spec.url && (other.id ?? other.url) === (spec.id ?? spec.url);
    };
    const rt = this.current;
    const live = rt?.listBackends?.().find((b) => b.id === (spec.id ?? spec.url) && b.url === spec.url && b.state !== 'removed');
    if (live) return live;
    if (!rt && this.registrations.some(same)) return null;
    let info: BackendInfo | null = null;
    if (rt) {
      info = this.apply(rt, reg);
      if (!info) throw new ValidationError('this runtime has no backend pool', [{ path: 'address', message: 'backends cannot be added' }]);
    }
    if (!this.registrations.some(same)) this.registrations.push({ ...reg, ...(info ? { appliedId: info.id } : {}) });
    return info;
  }

  clearBackends(): number {
    let n = this.registrations.length;
    this.registrations.length = 0;
    const rt = this.current;
    if (rt?.listBackends && rt.removeBackend) {
      const live = rt.listBackends();
      n = Math.max(n, live.length);
      for (const b of live) rt.removeBackend(b.id);
    }
    return n;
  }

  warn(message: string): void {
    if (this.deps.warn) this.deps.warn(message);
    else process.stderr.write(`rollout serve: ${message}\n`);
  }

  forgetBackend(id: string): void {
    for (let i = this.registrations.length - 1; i >= 0; i--) {
      const r = this.registrations[i]!;
      if (r.appliedId === id || r.id === id) this.registrations.splice(i, 1);
    }
  }

  /** Stops the runtime (cancelling live rollouts), closes WebSockets and the listener. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    await this.polar.close();
    await this.stop();
    this.closed = true;
    this.hub.close();
    await new Promise<void>((resolve) => {
      if (!this.server.listening) return resolve();
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }

  private apply(rt: ServiceRuntime, reg: BackendRegistration): BackendInfo | null {
    if (!rt.addBackend) return null;
    const spec = parseAddress(reg.address, reg);
    // A backend registered without its tokenizer (and every --backend) serves the service's own
    // model: keyed so, jobs naming another model (custom_tokenizer) never land on it. The oracle
    // encodes with each job's codec and serves any.
    if (spec.codecKey === undefined && spec.url !== ORACLE_URL && rt.codec) spec.codecKey = rt.codec.name;
    return rt.addBackend(spec);
  }

  private async followEvents(rt: ServiceRuntime, signal: AbortSignal): Promise<void> {
    try {
      for await (const ev of rt.events({ signal, bufferSize: 10_000 })) {
        if (ev.type === 'gap') {
          if (ev.to > this._lastSeq) this._lastSeq = ev.to;
        } else if (ev.seq > this._lastSeq) this._lastSeq = ev.seq;
        this.metrics.observe(ev);
      }
    } catch {
      // The runtime closed under us; metrics are an observer and never take the service down.
    }
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.lock.then(fn, fn);
    // The caller of fn sees its rejection through `next`; the lock only orders calls.
    this.lock = next.catch(() => undefined);
    return next;
  }
}

/** Builds a {@link RolloutService}. Throws ValidationError on bad options or a bad `--backend`. */
export function createService(deps: ServiceDeps, options: ServiceOptionsInput = {}): RolloutService {
  return new RolloutService(deps, options);
}
