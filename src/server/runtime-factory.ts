import type { AgentHandler } from '../proxy/agent-contract.js';
import { BackendPool } from '../llm/backend-pool.js';
import type { BackendPoolOptionsInput } from '../llm/backend-pool-options.js';
import type { ChatCodec } from '../llm/chat-codec.js';
import type { SharedBackendLoad } from '../llm/shared-backend-load.js';
import { OracleBackend } from '../llm/oracle-backend.js';
import { systemClock, type Clock } from '../clock.js';
import { createRuntime } from '../runtime/runtime.js';
import type { RuntimeOptionsInput } from '../runtime/runtime-options.js';
import type { SandboxProvider } from '../sandbox/sandbox.js';
import { ServiceLlm } from './service-llm.js';
import type { RuntimeFactory, ServiceRuntime } from './service-runtime.js';

/** What the service's runtime is made of. */
export interface ServiceRuntimeParts {
  /** The chat codec shared by the runtime and the oracle backend (must match the backends' tokenizer). */
  codec: ChatCodec;
  /** A fresh sandbox provider per runtime (closed with it). */
  sandboxes: () => SandboxProvider | Promise<SandboxProvider>;
  /** Runtime options from the config file (stages, budgets, retries...). */
  runtime?: Omit<RuntimeOptionsInput, 'llm' | 'sandboxes' | 'codec' | 'inspect'> | undefined;
  /** Backend pool options from the config file. */
  pool?: BackendPoolOptionsInput | undefined;
  /** Extra task handlers. */
  handlers?: AgentHandler[] | undefined;
  /** An XState inspection observer (`--inspect`). */
  inspect?: unknown;
  /** The process's clock, shared by the runtime, the backend pool and the oracle. Default the system clock. */
  clock?: Clock | undefined;
  /** Events retained for WebSocket resume. Default 50,000. */
  retainEvents?: number | undefined;
  /** Other processes' load on the same backends (a cluster worker's), counted by the pool's least-loaded picks. */
  sharedLoad?: SharedBackendLoad | undefined;
}

/**
 * A {@link RuntimeFactory} for `rollout serve`: each call makes a backend pool wrapped in
 * {@link ServiceLlm} (so the address `oracle` works), a sandbox provider, and an embedded
 * runtime retaining events for resume. The returned runtime's `close()` also closes the pool and
 * the sandbox provider, which the runtime does not own — so a ProRL `/stop` leaves no sandbox,
 * host process or probe timer behind.
 */
export function serviceRuntimeFactory(parts: ServiceRuntimeParts): RuntimeFactory {
  return async () => {
    const clock = parts.clock ?? systemClock;
    const pool = new BackendPool(parts.pool ?? {}, { timers: clock, now: () => clock.now(), sharedLoad: parts.sharedLoad });
    const llm = new ServiceLlm(pool, (spec) => new OracleBackend({ codec: parts.codec, backendId: spec.id ?? 'oracle', weightVersion: spec.weightVersion ?? null }), clock);
    let sandboxes: SandboxProvider;
    try {
      sandboxes = await parts.sandboxes();
    } catch (err) {
      await llm.close();
      throw err;
    }
    let rt: ReturnType<typeof createRuntime>;
    try {
      rt = createRuntime({
        ...(parts.runtime ?? {}),
        events: { retain: parts.retainEvents ?? 50_000, ...(parts.runtime?.events ?? {}) },
        handlers: [...(parts.runtime?.handlers ?? []), ...(parts.handlers ?? [])],
        llm,
        sandboxes,
        codec: parts.codec,
        clock,
        ...(parts.inspect ? { inspect: parts.inspect } : {}),
      });
    } catch (err) {
      await Promise.all([llm.close(), sandboxes.close()]);
      throw err;
    }
    const close = rt.close.bind(rt);
    // The host provider tells the store its sandboxes read images from; a test double may not.
    const imageStore = (sandboxes as { options?: { imageStore?: unknown } }).options?.imageStore;
    const service: ServiceRuntime = Object.assign(rt, {
      codec: parts.codec,
      ...(typeof imageStore === 'string' ? { imageStore } : {}),
      close: async (opts?: { drain?: boolean }) => {
        try {
          await close(opts);
        } finally {
          // Both are closed whatever the other does; neither has anything left to release on error.
          await Promise.all([llm.close().catch(() => undefined), sandboxes.close().catch(() => undefined)]);
        }
      },
    });
    return service;
  };
}
