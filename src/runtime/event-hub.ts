import type { RolloutEvent, RolloutEventInput } from '../protocol/events.js';
import type { Clock } from '../clock.js';
import { EventSubscriber, type EventItem } from './event-subscriber.js';

export type { EventGap, EventItem } from './event-subscriber.js';

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
 * Each subscriber is an {@link EventSubscriber} (shared with the cluster's gateway fan-out): a
 * bounded buffer that drops its oldest event and yields an `EventGap` in its place, so a slow
 * reader never blocks a rollout nor grows memory. A retention ring (option `retain`) lets a
 * subscriber resume after a cursor.
 */
export class EventHub {
  private seq = 0;
  private readonly subs = new Set<EventSubscriber>();
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
   * `counter` is the rollout's own (its session).
   */
  emit(counter: { nextRseq(): number }, groupId: string | null, input: RolloutEventInput): void {
    const ev = { ...input, seq: ++this.seq, rseq: counter.nextRseq(), ts: this.clock.now() } as RolloutEvent;
    const item: Stamped = { ev, groupId };
    if (this.retain > 0) {
      const idx = (this.ringHead + this.ringSize) % this.retain;
      this.ring[idx] = item;
      if (this.ringSize < this.retain) this.ringSize++;
      else this.ringHead = (this.ringHead + 1) % this.retain;
    }
    for (const s of this.subs) s.offer(ev, groupId);
  }

  /** Subscribes; see {@link SubscribeOptions}. The iterable ends on `signal`, `return()` or {@link close}. */
  subscribe(opts: SubscribeOptions = {}): AsyncIterable<EventItem> & AsyncIterator<EventItem> {
    const sub = new EventSubscriber(opts, opts.bufferSize ?? this.defaultBuffer, () => this.subs.delete(sub));
    if (this.closed) {
      sub.end();
      return sub;
    }
    if (opts.after !== undefined) {
      const oldest = this.ringSize > 0 ? this.ring[this.ringHead]!.ev.seq : this.seq + 1;
      if (opts.after + 1 < oldest && opts.after < this.seq) sub.gap(opts.after + 1, Math.min(oldest - 1, this.seq));
      for (let i = 0; i < this.ringSize; i++) {
        const it = this.ring[(this.ringHead + i) % this.retain]!;
        if (it.ev.seq > opts.after) sub.offer(it.ev, it.groupId);
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
