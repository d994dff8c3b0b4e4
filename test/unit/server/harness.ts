import { SandboxError } from '../../../src/errors.js';
import type { AgentHandler } from '../../../src/proxy/agent-contract.js';
import { defineToolAgent } from '../../../src/handlers/tool-agent.js';
import { toolSchemas } from '../../../src/handlers/tools.js';
import { ManualClock, type Clock } from '../../../src/clock.js';
import { serviceRuntimeFactory } from '../../../src/server/runtime-factory.js';
import { createService, type RolloutService } from '../../../src/server/service.js';
import type { ServiceOptionsInput } from '../../../src/server/service-options.js';
import type { BackendRegistration } from '../../../src/server/service-context.js';
import type { BackendControl, RuntimeFactory, ServiceRuntime } from '../../../src/server/service-runtime.js';

/** The service runtime with its backend control (the embedded runtime always has it). */
export type HarnessRuntime = ServiceRuntime & BackendControl;
import type { VisualizerHook } from '../../../src/server/http-server.js';
import { createTestHandler, MemorySandboxProvider, TestCodec } from '../../../src/testing/index.js';

/**
 * A service on port 0 over the REAL service runtime (supervisor, event hub, backend pool, the
 * built-in oracle backend replaying `instance.oracle`), with fake parts only where the product
 * needs an outside world: in-memory sandboxes and a test codec. Everything runs on one
 * {@link ManualClock}: no timer of the runtime fires unless a test advances it, so a rollout
 * parked in `sleep N` stays live until it is cancelled or the test moves time.
 */
export interface Harness {
  service: RolloutService;
  url: string;
  clock: ManualClock;
  /** Every runtime the service made (a new one per ProRL `/start`). */
  runtimes: HarnessRuntime[];
  /** The options each runtime was closed with, in order. */
  closes: ({ drain?: boolean } | undefined)[];
  /** The sandbox provider of each runtime. */
  sandboxes: MemorySandboxProvider[];
  /** The current runtime. */
  rt(): HarnessRuntime;
  /**
   * Resolves once `cond` holds, re-checking it after every event of the current runtime (no
   * timer, no polling). Rejects when the runtime's event stream ends first.
   */
  until(cond: () => boolean): Promise<void>;
  /** Closes the service and checks that no sandbox is left open. */
  close(): Promise<void>;
}

/** Options of {@link startHarness} besides the service's own. */
export interface HarnessDeps {
  /** Registered from the start. Default: the oracle backend alone. */
  backends?: BackendRegistration[];
  startStopped?: boolean;
  /** Events the runtime retains for resume. Default 1,000. */
  retention?: number;
  /** The one clock of the service and its runtimes. Default a new ManualClock. */
  clock?: ManualClock;
  visualizer?: VisualizerHook;
  warn?: (m: string) => void;
}

/** Data source of a handler whose evaluation fails with a SandboxError (an infra error in EVAL). */
export const EVAL_FAULT = 'eval-fault';

/** A tool agent whose `eval` throws a SandboxError: infra failures at EVAL over the real supervisor. */
function evalFaultHandler(): AgentHandler {
  return defineToolAgent({
    name: EVAL_FAULT,
    tools: toolSchemas(),
    async init(ctx) {
      return { messages: [{ role: 'user', content: 'q' }], sandbox: await ctx.createSandbox({}) };
    },
    async eval() {
      throw new SandboxError('evaluation sandbox lost', { code: 'SANDBOX_LOST', stage: 'eval' });
    },
  });
}

/** The factory the harness gives its service (exported for tests that build a second service). */
export function harnessRuntimeFactory(clock: Clock, h: Pick<Harness, 'runtimes' | 'closes' | 'sandboxes'>, retention = 1000): RuntimeFactory {
  const make = serviceRuntimeFactory({
    codec: new TestCodec(),
    clock,
    sandboxes: () => {
      const p = new MemorySandboxProvider({ clock });
      h.sandboxes.push(p);
      return p;
    },
    handlers: [createTestHandler(), evalFaultHandler()],
    // Infra errors end at once: a retry would wait for its backoff on the manual clock.
    runtime: { sandboxDriver: 'none', retries: { max: 0, backoffMs: 0, backoffMaxMs: 0 } },
    retainEvents: retention,
  });
  return async () => {
    const made = await make();
    if (!made.listBackends || !made.addBackend || !made.drainBackend || !made.removeBackend) throw new Error('the service runtime lost its backend control');
    const rt = made as HarnessRuntime;
    const close = rt.close.bind(rt);
    rt.close = (opts) => {
      h.closes.push(opts);
      return close(opts);
    };
    h.runtimes.push(rt);
    return rt;
  };
}

export async function startHarness(options: ServiceOptionsInput = {}, deps: HarnessDeps = {}): Promise<Harness> {
  const clock = deps.clock ?? new ManualClock();
  const parts = { runtimes: [] as HarnessRuntime[], closes: [] as ({ drain?: boolean } | undefined)[], sandboxes: [] as MemorySandboxProvider[] };
  const service = createService(
    {
      createRuntime: harnessRuntimeFactory(clock, parts, deps.retention),
      backends: deps.backends ?? [{ address: 'oracle' }],
      startStopped: deps.startStopped,
      clock,
      visualizer: deps.visualizer,
      warn: deps.warn,
    },
    { port: 0, backendsIntervalMs: 0, ...options },
  );
  const url = await service.listen();
  const rt = (): HarnessRuntime => parts.runtimes[parts.runtimes.length - 1]!;
  return {
    service,
    url,
    clock,
    ...parts,
    rt,
    until: (cond) => until(rt(), cond),
    close: async () => {
      await service.close();
      const open = parts.sandboxes.filter((p) => p.live !== 0).length;
      if (open) throw new Error(`${open} sandbox provider(s) left sandboxes open`);
    },
  };
}

async function until(rt: ServiceRuntime, cond: () => boolean): Promise<void> {
  if (cond()) return;
  const ac = new AbortController();
  try {
    // Subscribed before the re-check, so no event between the two is missed.
    const events = rt.events({ signal: ac.signal });
    if (cond()) return;
    for await (const _ of events) if (cond()) return;
  } finally {
    ac.abort();
  }
  if (!cond()) throw new Error('the runtime stopped emitting events before the condition held');
}

/** A tool call of the oracle's script. */
const bash = (command: string) => ({ content: `run ${command}`, tool_calls: [{ name: 'execute_bash', arguments: { command } }] });
const finish = { content: 'done', tool_calls: [{ name: 'finish', arguments: { message: 'done' } }] };

/**
 * A task of the test handler that the oracle backend plays: `runMs` of (manual-clock) work in the
 * sandbox, then `finish` (reward 1). With `runMs` the rollout waits in `acting` until the clock
 * moves past it.
 */
export const task = (extra: Record<string, unknown> = {}, runMs = 0): Record<string, unknown> => ({
  data_source: 'scripted',
  instance_id: 'm1',
  oracle: runMs > 0 ? [bash(`sleep ${runMs / 1000}`), finish] : [finish],
  ...extra,
});

/** A task that stays live (an hour-long command on the manual clock) until cancelled. */
export const heldTask = (extra: Record<string, unknown> = {}): Record<string, unknown> => task(extra, 3_600_000);

/** A task whose evaluation fails with an infra error (a SandboxError at EVAL). */
export const evalFaultTask = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({ data_source: EVAL_FAULT, instance_id: 'f1', oracle: [finish], ...extra });

/** POSTs JSON (or a raw string) and answers status and parsed body. */
export async function post(url: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: any; headers: Headers }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
}

export async function get(url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: any; headers: Headers }> {
  const res = await fetch(url, { headers });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // text answers (metrics)
  }
  return { status: res.status, body, headers: res.headers };
}

/**
 * Collects the messages of a WebSocket (or any emitter of `message`) and resolves `next(pred)`
 * on the first one that matches — already received or when it arrives. No timer, no polling.
 */
export class Inbox<T = any> {
  readonly msgs: T[] = [];
  private readonly waiters = new Set<{ pred: (m: T[]) => boolean; resolve: () => void }>();

  /** Feeds one message (call from the socket's `message` handler). */
  push(m: T): void {
    this.msgs.push(m);
    for (const w of this.waiters) {
      if (!w.pred(this.msgs)) continue;
      this.waiters.delete(w);
      w.resolve();
    }
  }

  /** Resolves once `pred` holds over every message received so far. */
  until(pred: (msgs: T[]) => boolean): Promise<void> {
    if (pred(this.msgs)) return Promise.resolve();
    return new Promise((resolve) => this.waiters.add({ pred, resolve }));
  }

  /** Resolves once a message matching `pred` has arrived. */
  some(pred: (m: T) => boolean): Promise<void> {
    return this.until((ms) => ms.some(pred));
  }
}
