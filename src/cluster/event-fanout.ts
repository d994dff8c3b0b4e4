import type { Redis } from 'ioredis';
import { EventSubscriber, type EventItem } from '../runtime/event-subscriber.js';
import type { EventsOptions } from '../runtime/runtime-api.js';
import { readAfter, type ClusterStore, type StoredEvent } from './cluster-store.js';
import { sleep, systemClock, type Clock } from '../clock.js';

/**
 * The gateway's view of the cluster's event stream. One loop tails the Redis stream (XREAD
 * BLOCK on its own connection) and hands each event to every local subscriber; a subscriber with
 * a cursor first replays `seq > after` from the stream (XRANGE), then continues live. Seqs are
 * global (the stream entry ids), so a client can resume on any gateway with the cursor it had.
 *
 * Each subscriber is the embedded hub's {@link EventSubscriber}, so buffering, gaps and resume
 * behave the same in both placements; live events that arrive during a replay are held and
 * delivered after it, minus the overlap.
 */
export class EventFanout {
  private readonly subs = new Set<EventSubscriber>();
  private readonly listeners = new Set<(e: StoredEvent) => void>();
  private tailSeq = 0;
  private stopped = false;
  private loop: Promise<void> | null = null;

  constructor(
    private readonly store: ClusterStore,
    /** A connection of its own: XREAD BLOCK holds it. */
    private readonly tailConn: Redis,
    private readonly defaultBuffer = 10_000,
    private readonly clock: Clock = systemClock,
  ) {}

  /** The last seq the tail has delivered. */
  get lastSeq(): number {
    return this.tailSeq;
  }

  /** Starts tailing after the stream's current end. */
  async start(): Promise<void> {
    this.tailSeq = await this.store.lastSeq();
    this.loop = this.run();
  }

  /** Every tailed event, to the runtime's own bookkeeping (results, summaries). */
  onEvent(fn: (e: StoredEvent) => void): void {
    this.listeners.add(fn);
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      let batch: StoredEvent[];
      try {
        batch = await readAfter(this.tailConn, this.store.keys.events, this.tailSeq, 1000);
      } catch {
        if (this.stopped) return;
        // Redis restarting: ioredis reconnects; try again shortly.
        await sleep(this.clock, 200);
        continue;
      }
      for (const e of batch) {
        if (e.ev.seq <= this.tailSeq) continue;
        this.tailSeq = e.ev.seq;
        for (const fn of this.listeners) fn(e);
        for (const s of this.subs) s.live(e.ev, e.groupId);
      }
    }
  }

  /** A subscription, as {@link Runtime.events}. */
  subscribe(opts: EventsOptions = {}): AsyncIterable<EventItem> & AsyncIterator<EventItem> {
    const sub = new EventSubscriber(opts, opts.bufferSize ?? this.defaultBuffer, () => this.subs.delete(sub));
    if (this.stopped) {
      sub.end();
      return sub;
    }
    this.subs.add(sub);
    if (opts.after !== undefined) {
      sub.hold();
      // Never rejects: replay catches Redis' failure and goes on live.
      void this.replay(sub, opts.after, this.tailSeq);
    } else {
      // Live only: nothing the tail delivered before this subscription.
      sub.release(this.tailSeq);
    }
    if (opts.signal) {
      if (opts.signal.aborted) sub.end();
      else opts.signal.addEventListener('abort', () => sub.end(), { once: true });
    }
    return sub;
  }

  private async replay(sub: EventSubscriber, after: number, upTo: number): Promise<void> {
    try {
      const oldest = await this.store.oldestSeq();
      // Seqs start at 1: a cursor of -1 or 0 means "from the start", not a hole at 0.
      const first = Math.max(after + 1, 1);
      let cursor = after;
      if (oldest !== null && first < oldest && first <= upTo) {
        sub.gap(first, Math.min(oldest - 1, upTo));
        cursor = oldest - 1;
      } else if (oldest === null && first <= upTo) {
        sub.gap(first, upTo);
        cursor = upTo;
      }
      while (cursor < upTo && !sub.isEnded) {
        const page = await this.store.range(cursor, upTo, 1000);
        if (page.length === 0) break;
        for (const e of page) sub.offer(e.ev, e.groupId);
        cursor = page[page.length - 1]!.ev.seq;
      }
    } catch {
      // Redis unreachable during replay: the subscriber continues live from here.
    }
    // Whatever the replay reached, nothing at or below the cursor is delivered again.
    sub.release(after);
  }

  /** Stops the tail and ends every subscription. */
  async close(): Promise<void> {
    this.stopped = true;
    for (const s of [...this.subs]) s.end();
    // XREAD BLOCK returns within its block time; disconnecting cuts it short.
    this.tailConn.disconnect();
    // The tail loop ends by the disconnect above; its error is that disconnect.
    await this.loop?.catch(() => undefined);
  }
}
