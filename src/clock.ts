/**
 * The runtime's notion of time. Everything that waits or measures goes through a {@link Clock}
 * so tests can drive time by hand ({@link ManualClock}) instead of sleeping on the wall clock.
 */

/** An opaque timer handle returned by {@link Clock.setTimeout}. */
export type TimerHandle = unknown;

/** Time source and timer factory. */
export interface Clock {
  /** Milliseconds since the epoch (or any fixed origin; only differences matter). */
  now(): number;
  /** Calls `fn` once after `ms`. The handle must not keep the process alive after `clearTimeout`. */
  setTimeout(fn: () => void, ms: number): TimerHandle;
  clearTimeout(handle: TimerHandle): void;
}

/** The wall clock, backed by `Date.now` and the global timers. */
export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
};

/**
 * Resolves after `ms` on `clock`, or rejects with the signal's reason (an `AbortError`-named
 * error when the reason is not an Error) when `signal` aborts first. Leaves no timer behind.
 */
export function sleep(clock: Clock, ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return Promise.reject(abortReason(signal));
  if (ms <= 0 && !signal) return Promise.resolve();
  return new Promise<void>((resolve, reject) => {
    const onAbort = (): void => {
      clock.clearTimeout(handle);
      reject(abortReason(signal!));
    };
    const handle = clock.setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, Math.max(0, ms));
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Calls `fn` every `ms` on `clock` until the returned function is called (a periodic timer on the
 * injected clock, so tests drive it with `ManualClock.advance`). The next timer is armed before
 * `fn` runs, so a throwing `fn` does not stop the period. Timers are unref'd where the clock's
 * handles allow it: a forgotten period never keeps the process alive.
 * @throws RangeError when `ms` is not a positive number.
 */
export function every(clock: Clock, ms: number, fn: () => void): () => void {
  // A zero period would fire forever within one ManualClock.advance.
  if (!(ms > 0)) throw new RangeError(`every: the period must be > 0 ms, got ${ms}`);
  let stopped = false;
  let handle: TimerHandle;
  const arm = (): void => {
    handle = unref(clock.setTimeout(tick, ms));
  };
  const tick = (): void => {
    if (stopped) return;
    arm();
    fn();
  };
  arm();
  return () => {
    stopped = true;
    clock.clearTimeout(handle);
  };
}

/**
 * Marks a timer so it does not keep the process alive, where the clock's handles allow it (the
 * system clock's do; a {@link ManualClock}'s need not). Returns the handle.
 */
export function unref(handle: TimerHandle): TimerHandle {
  (handle as { unref?: () => void } | null)?.unref?.();
  return handle;
}

/**
 * Resolves after every global 0 ms timer already set has run: for ordering after a library that
 * defers its own work on `setTimeout(0)` (timers of equal delay run in the order they were set).
 * Wall-clock by nature, whatever the injected clock: it waits on the library's real timer.
 */
export function afterQueuedTimers(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

/** The error a cancelled wait rejects with. */
export function abortReason(signal: AbortSignal): Error {
  const r: unknown = signal.reason;
  if (r instanceof Error) return r;
  const e = new Error(typeof r === 'string' ? r : 'aborted');
  e.name = 'AbortError';
  return e;
}

interface ManualTimer {
  at: number;
  seq: number;
  fn: () => void;
}

/**
 * A clock that moves only when told to. Timers fire in deadline order (ties in creation order)
 * during {@link ManualClock.advance}, which also lets pending promise callbacks run between
 * timers so async chains settle as they would in real time.
 */
export class ManualClock implements Clock {
  private t: number;
  private seq = 0;
  private readonly timers = new Map<number, ManualTimer>();

  constructor(start = 1_700_000_000_000) {
    this.t = start;
  }

  now(): number {
    return this.t;
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const id = ++this.seq;
    this.timers.set(id, { at: this.t + Math.max(0, ms), seq: id, fn });
    return id;
  }

  clearTimeout(handle: TimerHandle): void {
    this.timers.delete(handle as number);
  }

  /** Timers not yet fired. */
  get pending(): number {
    return this.timers.size;
  }

  /**
   * Moves time forward by `ms`, firing every timer that falls due (including ones created by
   * fired timers) at its own time, and flushing microtasks between them.
   */
  async advance(ms: number): Promise<void> {
    const end = this.t + ms;
    await flush();
    for (;;) {
      const next = this.nextDue(end);
      if (!next) break;
      this.timers.delete(next.seq);
      this.t = Math.max(this.t, next.at);
      next.fn();
      await flush();
    }
    this.t = end;
    await flush();
  }

  /** Flushes pending promise callbacks without moving time. */
  async settle(): Promise<void> {
    await flush();
  }

  private nextDue(end: number): ManualTimer | undefined {
    let best: ManualTimer | undefined;
    for (const tm of this.timers.values()) {
      if (tm.at > end) continue;
      if (!best || tm.at < best.at || (tm.at === best.at && tm.seq < best.seq)) best = tm;
    }
    return best;
  }
}

/** Lets every queued microtask and already-due macrotask callback run. */
async function flush(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise<void>((r) => setImmediate(r));
}
