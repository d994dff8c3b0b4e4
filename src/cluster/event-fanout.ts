import type { Redis } from 'ioredis';
import type { RolloutEvent } from '../protocol/events.js';
import type { EventsOptions } from '../runtime/runtime-api.js';
import { readAfter, type ClusterStore, type StoredEvent } from './cluster-store.js';

type Item = RolloutEvent | { type: 'gap'; from: number; to: number };

/**
 * The gateway's view of the cluster's event stream. One loop tails the Redis stream (XREAD
 * BLOCK on its own connection) and hands each event to every local subscriber; a subscriber with
 * a cursor first replays `seq > after` from the stream (XRANGE), then continues live. Seqs are
 * global (the stream entry ids), so a client can resume on any gateway with the cursor it had.
 *
 * A subscriber's buffer is bounded: when full, its oldest events are dropped and a gap is
 * yielded in their place, as the embedded hub does.
 */
export class EventFanout {
  private readonly subs = new Set<FanoutSubscriber>();
  private readonly listeners = new Set<(e: StoredEvent) => void>();
  private tailSeq = 0;
  private stopped = false;
  private loop: Promise<void> | null = null;

  constructor(
    private readonly store: ClusterStore,
    /** A connection of its own: XREAD BLOCK holds it. */
    private readonly tailConn: Redis,
    private readonly defaultBuffer = 10_000,
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
        await new Promise((r) => setTimeout(r, 200));
        continue;
      }
      for (const e of batch) {
        if (e.ev.seq <= this.tailSeq) continue;
        this.tailSeq = e.ev.seq;
        for (const fn of this.listeners) fn(e);
        for (const s of this.subs) s.live(e);
      }
    }
  }

  /** A subscription, as {@link Runtime.events}. */
  subscribe(opts: EventsOptions = {}): AsyncIterable<Item> & AsyncIterator<Item> {
    const sub = new FanoutSubscriber(opts, opts.bufferSize ?? this.defaultBuffer, () => this.subs.delete(sub));
    if (this.stopped) {
      sub.end();
      return sub;
    }
    this.subs.add(sub);
    if (opts.after !== undefined) void this.replay(sub, opts.after, this.tailSeq);
    else sub.replayed(this.tailSeq);
    if (opts.signal) {
      if (opts.signal.aborted) sub.end();
      else opts.signal.addEventListener('abort', () => sub.end(), { once: true });
    }
    return sub;
  }

  private async replay(sub: FanoutSubscriber, after: number, upTo: number): Promise<void> {
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
        for (const e of page) sub.replay(e);
        cursor = page[page.length - 1]!.ev.seq;
      }
    } catch {
      // Redis unreachable during replay: the subscriber continues live from here.
    }
    sub.replayed(upTo);
  }

  /** Stops the tail and ends every subscription. */
  async close(): Promise<void> {
    this.stopped = true;
    for (const s of [...this.subs]) s.end();
    // XREAD BLOCK returns within its block time; disconnecting cuts it short.
    this.tailConn.disconnect();
    await this.loop?.catch(() => undefined);
  }
}

class FanoutSubscriber implements AsyncIterable<Item>, AsyncIterator<Item> {
  private buf: Item[] = [];
  private head = 0;
  /** Live events that arrived while the replay ran; delivered after it, minus duplicates. */
  private held: StoredEvent[] | null = [];
  private delivered = -1;
  private pendingGap: { type: 'gap'; from: number; to: number } | null = null;
  private waiter: ((r: IteratorResult<Item>) => void) | null = null;
  private ended = false;

  constructor(
    private readonly opts: EventsOptions,
    private readonly cap: number,
    private readonly detach: () => void,
  ) {}

  get isEnded(): boolean {
    return this.ended;
  }

  live(e: StoredEvent): void {
    if (this.held) this.held.push(e);
    else this.offer(e);
  }

  replay(e: StoredEvent): void {
    this.offer(e);
  }

  /** The replay reached `upTo`: flush what arrived live meanwhile. */
  replayed(upTo: number): void {
    const held = this.held ?? [];
    this.held = null;
    if (this.delivered < upTo) this.delivered = Math.max(this.delivered, this.opts.after ?? upTo);
    for (const e of held) this.offer(e);
  }

  gap(from: number, to: number): void {
    this.push({ type: 'gap', from, to });
  }

  private offer(e: StoredEvent): void {
    if (this.ended) return;
    if (e.ev.seq <= this.delivered) return;
    this.delivered = e.ev.seq;
    if (this.opts.rolloutId !== undefined && e.ev.rolloutId !== this.opts.rolloutId) return;
    if (this.opts.groupId !== undefined && e.groupId !== this.opts.groupId) return;
    this.push(e.ev);
  }

  private push(item: Item): void {
    if (item.type === 'gap') {
      this.mergeGap(item.from, item.to);
      return this.wake();
    }
    if (this.buf.length - this.head >= this.cap) {
      // Drop the oldest: the reader learns about it as a gap just before what it still has.
      const dropped = this.buf[this.head]!;
      this.buf[this.head++] = undefined as never;
      this.mergeGap(dropped.type === 'gap' ? dropped.from : dropped.seq, dropped.type === 'gap' ? dropped.to : dropped.seq);
    }
    this.buf.push(item);
    if (this.head > 1024 && this.head * 2 > this.buf.length) {
      this.buf = this.buf.slice(this.head);
      this.head = 0;
    }
    this.wake();
  }

  private mergeGap(from: number, to: number): void {
    this.pendingGap = this.pendingGap ? { type: 'gap', from: Math.min(this.pendingGap.from, from), to: Math.max(this.pendingGap.to, to) } : { type: 'gap', from, to };
  }

  private wake(): void {
    if (!this.waiter) return;
    const w = this.waiter;
    this.waiter = null;
    void this.next().then(w);
  }

  end(): void {
    if (this.ended) return;
    this.ended = true;
    this.detach();
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = null;
      w({ value: undefined, done: true });
    }
  }

  next(): Promise<IteratorResult<Item>> {
    if (this.pendingGap) {
      const g = this.pendingGap;
      this.pendingGap = null;
      return Promise.resolve({ value: g, done: false });
    }
    if (this.head < this.buf.length) {
      const v = this.buf[this.head]!;
      this.buf[this.head++] = undefined as never;
      return Promise.resolve({ value: v, done: false });
    }
    if (this.ended) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve) => {
      this.waiter = resolve;
    });
  }

  return(): Promise<IteratorResult<Item>> {
    this.end();
    this.buf = [];
    this.head = 0;
    this.pendingGap = null;
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): this {
    return this;
  }
}
