import { createInspector as createStatelyInspector, type StatelyInspectionEvent } from '@statelyai/inspect';
import type { InspectionEvent, Observer } from 'xstate';
import { WebSocket } from 'ws';

/** Options of {@link createInspector}; every field has a default. */
export interface InspectorOptions {
  /**
   * Events kept while the socket is not open (connecting or reconnecting); the oldest are dropped
   * past it, so a missing inspector never grows memory. Default 1,000.
   */
  maxDeferredEvents?: number;
  /**
   * When the socket already holds this many unsent bytes, new events are dropped instead of
   * queued: a slow inspector never slows a rollout or grows memory. Default 8 MiB.
   */
  maxBufferedBytes?: number;
  /** First reconnect delay; doubles per failure up to 30 s. Default 1,000 ms. */
  reconnectMs?: number;
  /** Depth past which snapshots and events are cut when serialized. Default 10. */
  serializationDepthLimit?: number;
}

/** A live XState inspection feed; pass `inspect` to `createActor(machine, { inspect })`. */
export interface RuntimeInspector {
  /** The observer XState calls for every actor, event and snapshot. */
  readonly inspect: Observer<InspectionEvent>;
  /** Counts, for tests and the health route. */
  stats(): { sent: number; dropped: number; deferred: number };
  /** Closes the socket and cancels any pending reconnect; idempotent. Events after it are ignored. */
  close(): Promise<void>;
}

/**
 * Turns `--inspect URL` into an XState `inspect` observer that sends every inspection event to a
 * WebSocket at `url` in the wire format of `@statelyai/inspect`'s WebSocket inspector (one JSON
 * text frame per `@xstate.actor` / `@xstate.event` / `@xstate.snapshot`, with `sessionId`,
 * `rootId`, `_version`, `createdAt`), so Stately's inspector — or its bridge server
 * `@statelyai/inspect/server` — can attach.
 *
 * The conversion is `@statelyai/inspect`'s own `createInspector`; only the transport is ours,
 * because its `WebSocketAdapter` keeps retrying every 5 s after `stop()` (a timer that outlives
 * the runtime) and re-sends its whole deferred buffer on every reconnect.
 *
 * Connecting is lazy and never throws: a refused or dropped connection is retried with backoff
 * and the events meanwhile are kept in a bounded buffer. Throws TypeError only for a URL that is
 * not `ws:` / `wss:`.
 *
 * Off by default: the runtime passes no `inspect` option unless `--inspect` is given, so no
 * event is converted or serialized when nobody watches.
 */
export function createInspector(url: string, options: InspectorOptions = {}): RuntimeInspector {
  const parsed = new URL(url);
  if (parsed.protocol !== 'ws:' && parsed.protocol !== 'wss:') {
    throw new TypeError(`--inspect needs a ws:// or wss:// URL, got ${url}`);
  }
  const maxDeferred = options.maxDeferredEvents ?? 1_000;
  const maxBuffered = options.maxBufferedBytes ?? 8 * 1024 * 1024;
  const baseReconnect = options.reconnectMs ?? 1_000;
  const depthLimit = options.serializationDepthLimit ?? 10;

  let ws: WebSocket | null = null;
  let open = false;
  let closed = false;
  let reconnectTimer: NodeJS.Timeout | null = null;
  let delay = baseReconnect;
  let sent = 0;
  let dropped = 0;
  // Serialized frames, so a flush after reconnect sends exactly what would have been sent live.
  const deferred: string[] = [];

  const connect = (): void => {
    if (closed) return;
    const socket = new WebSocket(url);
    ws = socket;
    socket.on('open', () => {
      open = true;
      delay = baseReconnect;
      for (const frame of deferred.splice(0)) {
        socket.send(frame);
        sent++;
      }
    });
    // The receiving side (Stately's bridge) sends nothing we need; drain it.
    socket.on('message', () => {});
    socket.on('error', () => {
      // 'close' follows every 'error'; reconnection is decided there.
    });
    socket.on('close', () => {
      open = false;
      if (ws === socket) ws = null;
      if (closed) return;
      reconnectTimer = setTimeout(() => {
        reconnectTimer = null;
        connect();
      }, delay);
      reconnectTimer.unref();
      delay = Math.min(delay * 2, 30_000);
    });
  };

  const adapter = {
    send(event: StatelyInspectionEvent): void {
      if (closed) return;
      const frame = toJson(event, depthLimit);
      if (open && ws !== null) {
        if (ws.bufferedAmount > maxBuffered) {
          dropped++;
          return;
        }
        ws.send(frame);
        sent++;
        return;
      }
      deferred.push(frame);
      if (deferred.length > maxDeferred) {
        deferred.shift();
        dropped++;
      }
    },
  };

  const stately = createStatelyInspector(adapter, {
    autoStart: false,
    ...(options.serializationDepthLimit !== undefined ? { serializationDepthLimit: options.serializationDepthLimit } : {}),
  });
  connect();

  return {
    inspect: {
      next: (event: InspectionEvent): void => {
        if (!closed) stately.inspect.next?.(event);
      },
    },
    stats: () => ({ sent, dropped, deferred: deferred.length }),
    async close(): Promise<void> {
      if (closed) return;
      closed = true;
      if (reconnectTimer !== null) clearTimeout(reconnectTimer);
      reconnectTimer = null;
      deferred.length = 0;
      const socket = ws;
      ws = null;
      open = false;
      if (socket === null) return;
      // Give @statelyai/inspect's deferred conversions (setTimeout 0) no socket to write to,
      // then wait for the close handshake so no handle outlives the runtime.
      await new Promise<void>((resolve) => {
        if (socket.readyState === WebSocket.CLOSED) return resolve();
        const force = setTimeout(() => socket.terminate(), 1_000);
        socket.once('close', () => {
          clearTimeout(force);
          resolve();
        });
        if (socket.readyState === WebSocket.CONNECTING) socket.terminate();
        else socket.close();
      });
    },
  };
}

/**
 * JSON with cycles cut and depth limited, as @statelyai/inspect's serializer does: snapshots
 * carry actor refs (cyclic through `_parent` / `system`) and functions, which plain
 * `JSON.stringify` throws on or expands without bound.
 */
function toJson(value: unknown, maxDepth: number): string {
  const seen = new WeakSet<object>();
  const walk = (v: unknown, depth: number): unknown => {
    if (typeof v === 'function') return { type: v.name };
    if (typeof v === 'bigint') return v.toString();
    if (v === null || typeof v !== 'object') return v;
    if (seen.has(v)) return '[Circular]';
    if (depth >= maxDepth) return Array.isArray(v) ? '[Array]' : '[Object]';
    const withJson = v as { toJSON?: () => unknown };
    if (typeof withJson.toJSON === 'function') return walk(withJson.toJSON(), depth);
    seen.add(v);
    let out: unknown;
    if (Array.isArray(v)) out = v.map((item) => walk(item, depth + 1));
    else {
      const obj: Record<string, unknown> = {};
      for (const [key, item] of Object.entries(v)) {
        if (item !== undefined) obj[key] = walk(item, depth + 1);
      }
      out = obj;
    }
    seen.delete(v);
    return out;
  };
  return JSON.stringify(walk(value, 0)) ?? 'null';
}
