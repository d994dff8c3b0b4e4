import { Heap } from 'heap-js';

/** What a rollout's deadline enforces. */
export type DeadlineKind = 'budget' | 'wall' | 'stale' | 'llm' | 'action';

/** One heap entry: "look at this rollout at `at`". */
export interface DeadlineEntry {
  at: number;
  rolloutId: string;
}

/**
 * Deadlines of all rollouts in one min-heap (heap-js) keyed by `at`. The deadlines themselves
 * are data in each rollout's record; the heap only says when to look. Entries are never
 * removed in place (heap-js removal is O(n)): the owner keeps at most one live entry per
 * rollout (its `armedAt`) and ignores superseded entries when they pop, so the heap stays
 * O(live rollouts) and push/pop are O(log n).
 */
export class DeadlineIndex {
  private readonly heap = new Heap<DeadlineEntry>((a, b) => a.at - b.at);

  get size(): number {
    return this.heap.size();
  }

  push(e: DeadlineEntry): void {
    this.heap.push(e);
  }

  /** The earliest entry, if any. */
  peek(): DeadlineEntry | undefined {
    return this.heap.peek();
  }

  /** Removes and returns every entry with `at <= now`, earliest first. */
  popDue(now: number): DeadlineEntry[] {
    const out: DeadlineEntry[] = [];
    for (;;) {
      const top = this.heap.peek();
      if (!top || top.at > now) break;
      out.push(this.heap.pop()!);
    }
    return out;
  }

  /** Drops entries `keep` rejects, in O(n): for when many superseded entries pile up. */
  compact(keep: (e: DeadlineEntry) => boolean): void {
    const kept = this.heap.toArray().filter(keep);
    this.heap.init(kept);
  }

  clear(): void {
    this.heap.clear();
  }
}
