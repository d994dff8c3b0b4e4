import type { ServerResponse } from 'node:http';
import type { Clock, TimerHandle } from '../../clock.js';

/** Events one SSE subscriber may hold before the oldest are dropped (Polar's `_MAX_QUEUE_SIZE`). */
const MAX_QUEUE = 256;
/** A subscriber with nothing to read gets a `ping` after this long (Polar's heartbeat). */
export const HEARTBEAT_MS = 15_000;

interface PolarEvent {
  type: string;
  ts: string;
  data: Record<string, unknown>;
}

interface Subscriber {
  res: ServerResponse;
  timer: TimerHandle | null;
  /** Events not yet written because the socket is full. */
  queue: PolarEvent[];
}

/**
 * Polar's `/events` feed (`platform/events.py`): `data: {"type", "ts", "data"}` frames over SSE,
 * a `hello` first, a `ping` after 15 s without an event. Publishing costs nothing without
 * subscribers; a slow subscriber keeps at most 256 events (the oldest dropped) and never slows
 * a task.
 */
export class PolarEventBus {
  private readonly subs = new Set<Subscriber>();

  constructor(private readonly clock: Clock) {}

  get subscribers(): number {
    return this.subs.size;
  }

  publish(type: string, data: Record<string, unknown>): void {
    if (this.subs.size === 0) return;
    const ev: PolarEvent = { type, ts: new Date(this.clock.now()).toISOString(), data };
    for (const s of this.subs) this.send(s, ev);
  }

  /** Streams to `res` until the client goes away or the bus closes. */
  subscribe(res: ServerResponse): void {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive', 'x-accel-buffering': 'no' });
    const s: Subscriber = { res, timer: null, queue: [] };
    this.subs.add(s);
    res.on('close', () => this.drop(s));
    res.on('drain', () => this.flush(s));
    this.send(s, { type: 'hello', ts: new Date(this.clock.now()).toISOString(), data: {} });
  }

  close(): void {
    for (const s of [...this.subs]) {
      this.drop(s);
      s.res.end();
    }
  }

  private send(s: Subscriber, ev: PolarEvent): void {
    s.queue.push(ev);
    if (s.queue.length > MAX_QUEUE) s.queue.shift();
    this.flush(s);
  }

  private flush(s: Subscriber): void {
    if (!this.subs.has(s)) return;
    while (s.queue.length > 0 && !s.res.writableNeedDrain && !s.res.destroyed) {
      s.res.write(`data: ${JSON.stringify(s.queue.shift())}\n\n`);
    }
    if (s.timer !== null) this.clock.clearTimeout(s.timer);
    s.timer = this.clock.setTimeout(() => this.send(s, { type: 'ping', ts: new Date(this.clock.now()).toISOString(), data: {} }), HEARTBEAT_MS);
    (s.timer as { unref?: () => void } | null)?.unref?.();
  }

  private drop(s: Subscriber): void {
    if (s.timer !== null) this.clock.clearTimeout(s.timer);
    s.timer = null;
    this.subs.delete(s);
  }
}
