import { afterEach, expect } from 'vitest';
import { descendants, serve, type Served } from '../service/harness.js';

/** What {@link polarServer} gives a Polar e2e file. */
export interface PolarServer {
  /** Starts `rollout serve ARGS` (stopped after the test). */
  start(args: string[]): Promise<Served>;
  /** Stops the running server now (a restart test); its exit code. */
  stop(): Promise<number | null>;
  /** The running server. */
  readonly served: Served;
  /** One JSON call to the running server, as slime_bridge makes it: status and parsed body. */
  api(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }>;
}

/**
 * The `rollout serve` a Polar e2e test drives, one per test: after each test it is stopped with
 * SIGTERM, must exit 0, and must leave no process behind. Call at the file's top level.
 */
export function polarServer(): PolarServer {
  let server: Served | null = null;
  afterEach(async () => {
    if (server) {
      const pid = server.child.pid!;
      const s = server;
      server = null;
      expect(await s.stop()).toBe(0);
      expect(descendants(pid)).toEqual([]);
    }
  });
  const running = (): Served => {
    if (!server) throw new Error('no rollout serve is running: start() it first');
    return server;
  };
  return {
    async start(args) {
      server = await serve(args);
      return server;
    },
    stop() {
      const s = running();
      server = null;
      return s.stop();
    },
    get served() {
      return running();
    },
    async api(method, path, body) {
      const res = await fetch(running().url + path, { method, headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
      const text = await res.text();
      return { status: res.status, body: text ? JSON.parse(text) : undefined };
    },
  };
}
