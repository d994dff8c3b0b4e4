import type { BackendInfo } from '../llm/llm-client.js';
import type { ServiceMetrics } from './metrics.js';
import type { ServiceOptions } from './service-options.js';
import type { ServiceRuntime } from './service-runtime.js';

/** A backend address as registered, with the optional extras of `POST /v1/backends`. */
export interface BackendRegistration {
  address: string;
  id?: string | undefined;
  model?: string | undefined;
  weightVersion?: string | number | null | undefined;
  /** The codec name of the tokenizer the backend serves (see `backendCodecKey`). */
  codecKey?: string | undefined;
}

/** What the routes and the WebSocket hub see of the service. */
export interface ServiceContext {
  readonly options: ServiceOptions;
  readonly metrics: ServiceMetrics;
  /** The running runtime, or null between ProRL `/stop` and `/start`. */
  readonly runtime: ServiceRuntime | null;
  /** Increases at every start: a cursor from an older epoch does not apply to this runtime. */
  readonly epoch: number;
  /** The latest event seq seen (−1 before any). */
  readonly lastSeq: number;
  /** Starts a fresh runtime; false when one is already running. */
  start(): Promise<boolean>;
  /** Cancels every live rollout, kills their sandboxes, closes the runtime; false when already stopped. */
  stop(): Promise<boolean>;
  /**
   * Registers a backend. Applied at once while running (answers its info) and remembered, so it
   * is applied again after `/stop` + `/start`; while stopped it is only buffered (answers null).
   * Throws ValidationError for a bad address.
   */
  addBackend(reg: BackendRegistration): BackendInfo | null;
  /** Removes every backend, running and buffered; answers how many. */
  clearBackends(): number;
  /** Forgets a registration by backend id (after DELETE). */
  forgetBackend(id: string): void;
  /** Writes an operator-facing warning (stderr unless the service was given a `warn`). */
  warn(message: string): void;
}
