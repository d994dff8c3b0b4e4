import type { RolloutEvent } from '../protocol/events.js';
import type { ClusterStore } from './cluster-store.js';

type Op = { ev: RolloutEvent; groupId: string | null } | { marker: () => void };

/**
 * The worker's outgoing event path: events of the embedded runtime are queued and written to
 * the cluster stream in pipelined batches (one round trip per batch, not per event — on a loaded
 * machine a round trip costs milliseconds, and a rollout emits a dozen events in a burst), in
 * the order the runtime emitted them. A marker resolves once everything queued before it is
 * written, so a result is committed only after its rollout's earlier events.
 */
export class EventSink {
  private queue: Op[] = [];
  private flushing: Promise<void> | null = null;

  constructor(
    private readonly store: ClusterStore,
    private readonly log: (line: string) => void,
    private readonly maxBatch = 500,
  ) {}

  push(ev: RolloutEvent, groupId: string | null): void {
    this.queue.push({ ev, groupId });
    this.kick();
  }

  /** Resolves once every event pushed before this call is written (or failed to be). */
  drained(): Promise<void> {
    return new Promise((resolve) => {
      this.queue.push({ marker: resolve });
      this.kick();
    });
  }

  private kick(): void {
    this.flushing ??= this.flush().finally(() => {
      this.flushing = null;
      if (this.queue.length) this.kick();
    });
  }

  private async flush(): Promise<void> {
    while (this.queue.length) {
      const batch = this.queue.splice(0, this.maxBatch);
      const events = batch.filter((o): o is Exclude<Op, { marker: () => void }> => 'ev' in o);
      if (events.length) {
        try {
          await this.store.appendMany(events);
        } catch (err) {
          // Events are observation: a batch Redis refused is reported, never retried into a loop.
          this.log(`event stream: ${events.length} events not written: ${(err as Error).message}`);
        }
      }
      for (const o of batch) if ('marker' in o) o.marker();
    }
  }
}
