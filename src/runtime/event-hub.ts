import type { RolloutEvent, RolloutEventInput } from '../protocol/events.js';
import type { Clock } from './clock.js';

/** A hole in an event stream: events `from..to` (runtime seqs, inclusive) were dropped or are no longer retained. */
export interface EventGap {
  type: 'gap';
  from: number;
  to: number;
}

/** What a subscriber receives. */
export type EventItem = RolloutEvent | EventGap;

/** Subscription options. */
export interface SubscribeOptions {
  rolloutId?: string | undefined;
  groupId?: string | undefined;
  /** Replay retained events with `seq > after` first. */
  after?: number | undefined;
  bufferSize?: number | undefined;
  signal?: AbortSignal | undefined;
}

interface Stamped {
  ev: RolloutEvent;
  groupId: string | null;
}

/**
 * Stamps and distributes rollout events. Callers check {@link active} before building an
 * event, so with no subscriber and no retention the cost is one boolean read.
 *
 * Each subscriber has a bounded ring buffer: when it is full the oldest event is dropped and
 * a {@link EventGap} is yielded in its place, so a slow reader never blocks a rollout nor grows
 * memory. A retention ring (option `retain`) lets a subscriber resume after a cursor.
 */
export class EventHub {
  private seq = 0;
  private readonly subs = new Set<Subscriber>();
  private readonly ring: (Stamped | undefined)[];
  private ringHead = 0;
  private ringSize = 0;
  private closed = false;

  constructor(
    private readonly clock: Clock,
    private readonly retain: number,
    private readonly defaultBuffer: number,
  ) {
    this.ring = new Array<Stamped | undefined>(retain);
  }

  /** True when an emitted event would reach anyone (a subscriber or the retention ring). */
  get active(): boolean {
    return this.subs.size > 0 || this.retain > 0;
  }

  /** The last seq handed out. */
  get lastSeq(): number {
    return this.seq;
  }

  get subscribers(): number {
    return this.subs.size;
  }

  /**
   * Stamps `seq` (runtime-wide), `rseq` (per rollout, from `counter`) and `ts`, then delivers.
   * `counter` is the rollout's own mutable counter object.
   */
  emit(counter: { rseq: number }, groupId: string | null, input: RolloutEventInput): void {
    const ev = { ...input, seq: ++this.seq, rseq: ++counter.rseq, ts: this.clock.now() } as RolloutEvent;
    const item: Stamped = { ev, groupId };
    if (this.retain > 0) {
      const idx = (this.ringHead + this.ringSize) % this.retain;
      this.ring[idx] = item;
      if (this.ringSize < this.retain) this.ringSize++;
      else this.ringHead = (this.ringHead + 1) % this.retain;
    }
    for (const s of this.subs) s.offer(item);
  }

  /** Subscribes; see {@link SubscribeOptions}. The iterable ends on `signal`, `return()` or {@link close}. */
  subscribe(opts: SubscribeOptions = {}): AsyncIterable<EventItem> & AsyncIterator<EventItem> {
    const sub = new Subscriber(opts, opts.bufferSize ?? this.defaultBuffer, () => this.subs.delete(sub));
    if (this.closed) {
      sub.end();
      return sub;
    }
    if (opts.after !== undefined) {
      const oldest = this.ringSize > 0 ? this.ring[this.ringHead]!.ev.seq : this.seq + 1;
      if (opts.after + 1 < oldest && opts.after < this.seq) sub.pushGap(opts.after + 1, Math.min(oldest - 1, this.seq));
      for (let i = 0; i < this.ringSize; i++) {
        const it = this.ring[(this.ringHead + i) % this.retain]!;
        if (it.ev.seq > opts.after) sub.offer(it);
      }
    }
    this.subs.add(sub);
    if (opts.signal) {
      if (opts.signal.aborted) sub.end();
      else opts.signal.addEventListener('abort', () => sub.end(), { once: true });
    }
    return sub;
  }

  /** Ends every subscription and drops retained events. */
  close(): void {
    this.closed = true;
    for (const s of [...this.subs]) s.end();
    this.ring.fill(undefined);
    this.ringSize = 0;
  }
}

class Subscriber implements AsyncIterable<EventItem>, AsyncIterator<EventItem> {
  private readonly buf: (EventItem | undefined)[];
  private head = 0;
  private size = 0;
  private gap: EventGap | null = null;
  private waiter: ((r: IteratorResult<EventItem>) => void) | null = null;
  private ended = false;

  constructor(
    private readonly opts: SubscribeOptions,
    private readonly cap: number,
    private readonly detach: () => void,
  ) {
    this.buf = new Array<EventItem | undefined>(cap);
  }

  offer(item: Stamped): void {
    if (this.ended) return;
    if (this.opts.rolloutId !== undefined && item.ev.rolloutId !== this.opts.rolloutId) return;
    if (this.opts.groupId !== undefined && item.groupId !== this.opts.groupId) return;
    if (this.waiter && this.size === 0 && !this.gap) {
      const w = this.waiter;
      this.waiter = null;
      w({ value: item.ev, done: false });
      return;
    }
    if (this.size === this.cap) {
      // Drop the oldest: the reader learns about it as a gap just before what it still has.
      const dropped = this.buf[this.head]!;
      this.buf[this.head] = undefined;
      this.head = (this.head + 1) % this.cap;
      this.size--;
      const from = dropped.type === 'gap' ? dropped.from : dropped.seq;
      const to = dropped.type === 'gap' ? dropped.to : dropped.seq;
      this.gap = this.gap ? { type: 'gap', from: Math.min(this.gap.from, from), to: Math.max(this.gap.to, to) } : { type: 'gap', from, to };
    }
    this.buf[(this.head + this.size) % this.cap] = item.ev;
    this.size++;
  }

  pushGap(from: number, to: number): void {
    this.gap = { type: 'gap', from, to };
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

  next(): Promise<IteratorResult<EventItem>> {
    if (this.gap) {
      const g = this.gap;
      this.gap = null;
      return Promise.resolve({ value: g, done: false });
    }
    if (this.size > 0) {
      const v = this.buf[this.head]!;
      this.buf[this.head] = undefined;
      this.head = (this.head + 1) % this.cap;
      this.size--;
      return Promise.resolve({ value: v, done: false });
    }
    if (this.ended) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve) => {
      this.waiter = resolve;
    });
  }

  return(): Promise<IteratorResult<EventItem>> {
    this.end();
    this.size = 0;
    this.gap = null;
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): this {
    return this;
  }
}
