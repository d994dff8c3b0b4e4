import { createService, type RolloutService } from '../../../src/server/service.js';
import type { ServiceOptionsInput } from '../../../src/server/service-options.js';
import type { BackendRegistration } from '../../../src/server/service-context.js';
import { FakeRuntime } from './fake-runtime.js';
import type { Clock } from '../../../src/runtime/clock.js';
import type { VisualizerHook } from '../../../src/server/http-server.js';

/** A service on port 0 over fake runtimes (a new one per start), and its base URL. */
export interface Harness {
  service: RolloutService;
  url: string;
  runtimes: FakeRuntime[];
  /** The current runtime. */
  rt(): FakeRuntime;
  close(): Promise<void>;
}

export async function startHarness(
  options: ServiceOptionsInput = {},
  deps: { backends?: BackendRegistration[]; startStopped?: boolean; retention?: number; clock?: Clock; visualizer?: VisualizerHook; warn?: (m: string) => void } = {},
): Promise<Harness> {
  const runtimes: FakeRuntime[] = [];
  const service = createService(
    {
      createRuntime: async () => {
        const rt = new FakeRuntime(deps.retention ?? 1000);
        runtimes.push(rt);
        return rt;
      },
      backends: deps.backends,
      startStopped: deps.startStopped,
      clock: deps.clock,
      visualizer: deps.visualizer,
      warn: deps.warn,
    },
    { port: 0, backendsIntervalMs: 0, ...options },
  );
  const url = await service.listen();
  return { service, url, runtimes, rt: () => runtimes[runtimes.length - 1]!, close: () => service.close() };
}

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

export const mathInstance = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({ data_source: 'math', instance_id: 'm1', ...extra });

/** Polls `cond` every 5 ms (up to ~2.5 s) — for state reached through another process or socket. */
export async function waitFor(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
  if (!cond()) throw new Error('condition not met');
}
