import type { RolloutEvent } from '../protocol/events.js';

/** A hole in an event stream: events `from..to` (seqs, inclusive) were dropped or are no longer retained. */
export interface EventGap {
  type: 'gap';
  from: number;
  to: number;
}

/** What a subscriber receives. */
export type EventItem = RolloutEvent | EventGap;

/** Which events a subscriber wants (absent: all). */
export interface EventFilter {
  rolloutId?: string | undefined;
  groupId?: string | undefined;
}

/** The smallest buffer allocated up front; it doubles up to the subscriber's cap as needed. */
const INITIAL_SLOTS = 64;

/**
 * One subscription to a stream of stamped events, as an async iterator: the queue shared by the
 * embedded {@link EventHub} and the cluster's gateway fan-out, so both keep the same semantics.
 *
 * - **Bounded.** At most `cap` events wait; when full, the oldest is dropped and the reader gets
 *   one {@link EventGap} (merged over every drop) before what it still has — a slow reader never
 *   blocks the emitter nor grows memory. The buffer grows on demand, so a large cap costs nothing
 *   until a reader falls behind.
 * - **Exactly once, in seq order.** An event whose seq is not above the last one offered is
 *   ignored, so a replay and the live stream may overlap.
 * - **Cursor replay.** Between {@link hold} and {@link release}, live events wait aside while the
 *   owner replays retained events with {@link offer}; `release` delivers the held ones after the
 *   replay, minus what it already covered.
 * - Ends on {@link end}, `return()`, or the owner's close; `next()` then answers `done` once the
 *   buffer is empty (`return()` discards it).
 */
export class EventSubscriber implements AsyncIterable<EventItem>, AsyncIterator<EventItem> {
  private buf: (RolloutEvent | undefined)[];
  private head = 0;
  private size = 0;
  private pendingGap: EventGap | null = null;
  private waiter: ((r: IteratorResult<EventItem>) => void) | null = null;
  private ended = false;
  /** Highest seq offered (delivered or filtered out). */
  private lastSeq = -Infinity;
  /** Live events that arrived during a replay; null when not replaying. */
  private held: { ev: RolloutEvent; groupId: string | null }[] | null = null;

  private readonly cap: number;

  constructor(
    private readonly filter: EventFilter,
    /** Most events waiting for the reader (at least 1). */
    cap: number,
    /** Called once when the subscription ends: the owner forgets it. */
    private readonly detach: () => void,
  ) {
    this.cap = Math.max(1, Math.floor(cap));
    this.buf = new Array<RolloutEvent | undefined>(Math.min(this.cap, INITIAL_SLOTS));
  }

  get isEnded(): boolean {
    return this.ended;
  }

  /** Offers an event (seqs ascending); filtered, deduplicated by seq, buffered or handed to a waiting reader. */
  offer(ev: RolloutEvent, groupId: string | null): void {
    if (this.ended || ev.seq <= this.lastSeq) return;
    this.lastSeq = ev.seq;
    if (this.filter.rolloutId !== undefined && ev.rolloutId !== this.filter.rolloutId) return;
    if (this.filter.groupId !== undefined && groupId !== this.filter.groupId) return;
    if (this.waiter && this.size === 0 && !this.pendingGap) {
      const w = this.waiter;
      this.waiter = null;
      w({ value: ev, done: false });
      return;
    }
    if (this.size === this.cap) {
      // Drop the oldest: the reader learns about it as a gap just before what it still has.
      const dropped = this.buf[this.head]!;
      this.buf[this.head] = undefined;
      this.head = (this.head + 1) % this.buf.length;
      this.size--;
      this.mergeGap(dropped.seq, dropped.seq);
    } else if (this.size === this.buf.length) {
      this.grow();
    }
    this.buf[(this.head + this.size) % this.buf.length] = ev;
    this.size++;
  }

  /** A live event: held while a replay runs, offered otherwise. */
  live(ev: RolloutEvent, groupId: string | null): void {
    if (this.held) this.held.push({ ev, groupId });
    else this.offer(ev, groupId);
  }

  /** Reports a hole (yielded before anything still buffered; merged with any pending one). */
  gap(from: number, to: number): void {
    if (this.ended) return;
    this.mergeGap(from, to);
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = null;
      // next() only builds resolved promises from the buffer, or parks a waiter: it never rejects.
      void this.next().then(w);
    }
  }

  /** Starts holding live events aside while the owner replays (see {@link release}). */
  hold(): void {
    this.held ??= [];
  }

  /**
   * The replay is done: nothing at or below `floor` is delivered from now on (what the replay
   * covered, or what the subscriber did not ask for), then the held live events follow.
   */
  release(floor: number): void {
    const held = this.held ?? [];
    this.held = null;
    if (this.lastSeq < floor) this.lastSeq = floor;
    for (const h of held) this.offer(h.ev, h.groupId);
  }

  end(): void {
    if (this.ended) return;
    this.ended = true;
    this.held = null;
    this.detach();
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = null;
      w({ value: undefined, done: true });
    }
  }

  next(): Promise<IteratorResult<EventItem>> {
    if (this.pendingGap) {
      const g = this.pendingGap;
      this.pendingGap = null;
      return Promise.resolve({ value: g, done: false });
    }
    if (this.size > 0) {
      const v = this.buf[this.head]!;
      this.buf[this.head] = undefined;
      this.head = (this.head + 1) % this.buf.length;
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
    this.buf = new Array<RolloutEvent | undefined>(0);
    this.head = 0;
    this.size = 0;
    this.pendingGap = null;
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  private mergeGap(from: number, to: number): void {
    const g = this.pendingGap;
    this.pendingGap = g ? { type: 'gap', from: Math.min(g.from, from), to: Math.max(g.to, to) } : { type: 'gap', from, to };
  }

  /** Doubles the ring (up to `cap`), unrolling it so the oldest event is at 0. */
  private grow(): void {
    const next = new Array<RolloutEvent | undefined>(Math.min(this.cap, this.buf.length * 2));
    for (let i = 0; i < this.size; i++) next[i] = this.buf[(this.head + i) % this.buf.length];
    this.buf = next;
    this.head = 0;
  }
}
