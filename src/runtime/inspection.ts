import { createInspector as createStatelyInspector, type StatelyInspectionEvent } from '@statelyai/inspect';
import type { InspectionEvent, Observer } from 'xstate';
import { WebSocket } from 'ws';
import { afterQueuedTimers, systemClock, unref, type Clock, type TimerHandle } from '../clock.js';

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
  /**
   * Which rollouts to inspect; default every one. A rollout is inspected when its id is in
   * `rollouts`, or its GRPO group id is in `groups`, or it falls in the `sampleRate` share (0–1,
   * decided by a hash of the group id — so a group is kept or skipped whole — or of the rollout id
   * when it has no group; the same ids are chosen on every run). With none of the three given,
   * all are inspected. Unchosen rollouts cost nothing: their actors get no observer at all.
   */
  only?: InspectSelection;
  /**
   * How long `close()` waits for a connection that is still being made, so the frames of a short
   * run are delivered rather than dropped. Default 5,000 ms.
   */
  flushTimeoutMs?: number;
  /**
   * Called once, the first time the inspector cannot be reached (and again only after it was
   * reached and lost). Default: one line on stderr.
   */
  onWarning?: (message: string) => void;
  /** The clock of the reconnect, flush and close timers. Default the system clock. */
  clock?: Clock;
}

/** The rollouts an inspector watches (see {@link InspectorOptions.only}). */
export interface InspectSelection {
  rollouts?: readonly string[];
  groups?: readonly string[];
  sampleRate?: number;
}

/** What the supervisor tells an inspector about the rollout whose actor it is about to start. */
export interface InspectedRollout {
  rolloutId: string;
  groupId: string | null;
  attempt: number;
}

/**
 * An inspection observer that can be narrowed per rollout: the supervisor calls `forRollout`
 * for each attempt's actor and passes what it returns (or nothing) to `createActor`.
 */
export interface RolloutInspectObserver extends Observer<InspectionEvent> {
  /** The observer for this rollout's actor, or undefined when it is not inspected. */
  forRollout(rollout: InspectedRollout): Observer<InspectionEvent> | undefined;
}

/** A live XState inspection feed; pass `inspect` to `createActor(machine, { inspect })`. */
export interface RuntimeInspector {
  /**
   * The observer XState calls for every actor, event and snapshot; pass it as the runtime's
   * `inspect` option. Its `forRollout` applies `only`, so the runtime starts unchosen rollouts
   * without an observer.
   */
  readonly inspect: RolloutInspectObserver;
  /** Counts, for tests and the health route; `failedConnects`: connections that closed before they opened. */
  stats(): { sent: number; dropped: number; deferred: number; failedConnects: number };
  /**
   * Flushes, then closes: events already observed are converted and sent (waiting up to
   * `flushTimeoutMs` for a connection still being made), the close handshake follows the last
   * frame, and any pending reconnect is cancelled. Idempotent; events after it are ignored.
   * Never throws; an unreachable inspector's frames are dropped.
   */
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
  const flushTimeout = options.flushTimeoutMs ?? 5_000;
  const clock = options.clock ?? systemClock;
  const warn = options.onWarning ?? ((m: string) => void process.stderr.write(`warning: ${m}\n`));
  const chosen = selection(options.only);

  let ws: WebSocket | null = null;
  let open = false;
  let closed = false;
  let reconnectTimer: TimerHandle | null = null;
  let delay = baseReconnect;
  let sent = 0;
  let failedConnects = 0;
  let dropped = 0;
  // Warn once per outage: set when a connection fails, cleared when one opens.
  let warned = false;
  let lastError = '';
  // Resolved whenever a connection attempt ends (open or close), for close()'s flush.
  let settled: Array<() => void> = [];
  const notify = (): void => {
    for (const f of settled.splice(0)) f();
  };
  // Serialized frames, so a flush after reconnect sends exactly what would have been sent live.
  const deferred: string[] = [];

  const connect = (): void => {
    if (closed) return;
    const socket = new WebSocket(url);
    ws = socket;
    socket.on('open', () => {
      open = true;
      warned = false;
      delay = baseReconnect;
      for (const frame of deferred.splice(0)) {
        socket.send(frame);
        sent++;
      }
      notify();
    });
    // The receiving side (Stately's bridge) sends nothing we need; drain it.
    socket.on('message', () => {});
    socket.on('error', (err: Error & { code?: string }) => {
      // 'close' follows every 'error'; reconnection is decided there.
      lastError = err.code ?? err.message;
    });
    socket.on('close', () => {
      const wasOpen = open;
      if (!wasOpen) failedConnects++;
      open = false;
      if (ws === socket) ws = null;
      notify();
      if (!warned && !closed) {
        warned = true;
        const why = wasOpen ? 'connection lost' : `cannot be reached${lastError ? ` (${lastError})` : ''}`;
        warn(`inspector at ${url} ${why}; retrying in the background, keeping the last ${maxDeferred} events meanwhile`);
      }
      if (closed) return;
      reconnectTimer = unref(
        clock.setTimeout(() => {
          reconnectTimer = null;
          connect();
        }, delay),
      );
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

  // Set when close() begins: new events are refused, conversions already queued still land.
  let closing = false;
  const observer: Observer<InspectionEvent> = {
    next: (event: InspectionEvent): void => {
      if (!closing) stately.inspect.next?.(event);
    },
  };

  return {
    inspect: {
      ...observer,
      forRollout: (rollout) => (chosen(rollout) ? observer : undefined),
    },
    stats: () => ({ sent, dropped, deferred: deferred.length, failedConnects }),
    async close(): Promise<void> {
      if (closing) return;
      closing = true;
      // @statelyai/inspect converts each event on a setTimeout(0); timers of equal delay run in
      // the order they were set, so one more setTimeout(0) runs after every queued conversion.
      await afterQueuedTimers();
      // A short run ends before the lazy connection opens: wait for it (bounded), so its frames
      // are sent — the deferred buffer is flushed on 'open'. A refused connection ends the wait.
      if (!open && deferred.length > 0 && ws !== null) {
        await new Promise<void>((resolve) => {
          const t = clock.setTimeout(resolve, flushTimeout);
          settled.push(() => {
            clock.clearTimeout(t);
            resolve();
          });
        });
      }
      closed = true;
      settled = [];
      if (reconnectTimer !== null) clock.clearTimeout(reconnectTimer);
      reconnectTimer = null;
      dropped += deferred.length;
      deferred.length = 0;
      const socket = ws;
      ws = null;
      open = false;
      if (socket === null) return;
      // close() queues the close frame after every frame already sent, so the receiver gets them
      // all; then wait for the handshake so no handle outlives the runtime.
      await new Promise<void>((resolve) => {
        if (socket.readyState === WebSocket.CLOSED) return resolve();
        const force = clock.setTimeout(() => socket.terminate(), 1_000);
        socket.once('close', () => {
          clock.clearTimeout(force);
          resolve();
        });
        if (socket.readyState === WebSocket.CONNECTING) socket.terminate();
        else socket.close();
      });
    },
  };
}

/** The predicate of `only`: every rollout when nothing narrows it. */
function selection(only: InspectSelection | undefined): (r: InspectedRollout) => boolean {
  const ids = new Set(only?.rollouts ?? []);
  const groups = new Set(only?.groups ?? []);
  const rate = only?.sampleRate;
  if (rate !== undefined && !(rate >= 0 && rate <= 1)) throw new RangeError(`inspect sampleRate must be within 0..1, got ${rate}`);
  if (ids.size === 0 && groups.size === 0 && rate === undefined) return () => true;
  return (r) =>
    ids.has(r.rolloutId) ||
    (r.groupId !== null && groups.has(r.groupId)) ||
    (rate !== undefined && unitHash(r.groupId ?? r.rolloutId) < rate);
}

/**
 * FNV-1a of `s` with murmur3's final mix, mapped to [0, 1): stable across runs and uniform even
 * for ids that differ in one trailing character (plain FNV's high bits are not).
 */
export function unitHash(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return (h >>> 0) / 2 ** 32;
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
