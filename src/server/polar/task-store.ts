import { createHash } from 'node:crypto';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { TaskStatus } from './polar-models.js';

/** A task record as persisted: its status (with results) and the fields `/tasks` lists. */
export interface StoredTask {
  status: TaskStatus;
  harness: string | null;
  model: string | null;
  created_at: number;
  updated_at: number;
}

/**
 * Persists Polar task records under `<stateDir>/polar/tasks/`, one JSON file per task named by
 * the SHA-256 of its id (an id is client text: it never becomes a path). A write goes to a
 * temporary file renamed into place, so a reader never sees half a record. Without a state dir
 * nothing is persisted and {@link load} finds nothing.
 */
export class TaskStore {
  private readonly dir: string | null;
  private ready: Promise<void> | null = null;
  /** The last write of each task: its writes happen in order, so an older record never lands last. */
  private readonly writes = new Map<string, Promise<void>>();
  private seq = 0;

  constructor(stateDir: string | undefined) {
    this.dir = stateDir ? join(stateDir, 'polar', 'tasks') : null;
  }

  get persistent(): boolean {
    return this.dir !== null;
  }

  /**
   * Writes the record after any earlier write of the same task; resolves once it is on disk.
   * Rejects on an I/O error (the caller logs it).
   */
  save(rec: StoredTask): Promise<void> {
    if (!this.dir) return Promise.resolve();
    const id = rec.status.task_id;
    const text = JSON.stringify(rec);
    // The previous write's failure was its own caller's to handle; this write goes on after it.
    const next = (this.writes.get(id) ?? Promise.resolve()).catch(() => undefined).then(() => this.write(id, text));
    this.writes.set(id, next);
    // Only the bookkeeping: `next` is returned, and its caller handles its failure.
    void next.finally(() => {
      if (this.writes.get(id) === next) this.writes.delete(id);
    }).catch(() => undefined);
    return next;
  }

  /** Resolves once every write started so far has landed (or failed): nothing of this store writes after it. */
  async flush(): Promise<void> {
    while (this.writes.size > 0) await Promise.all([...this.writes.values()].map((w) => w.catch(() => undefined)));
  }

  private async write(id: string, text: string): Promise<void> {
    this.ready ??= mkdir(this.dir!, { recursive: true, mode: 0o700 }).then(() => undefined);
    await this.ready;
    const file = this.file(id);
    const tmp = `${file}.${process.pid}.${++this.seq}.tmp`;
    await writeFile(tmp, text, { mode: 0o600 });
    await rename(tmp, file);
  }

  /** The persisted record of `taskId`, or null (none, no state dir, or unreadable). */
  async load(taskId: string): Promise<StoredTask | null> {
    if (!this.dir) return null;
    try {
      const rec = JSON.parse(await readFile(this.file(taskId), 'utf8')) as StoredTask;
      return rec.status?.task_id === taskId ? rec : null;
    } catch {
      return null;
    }
  }

  private file(taskId: string): string {
    return join(this.dir!, `${createHash('sha256').update(taskId).digest('hex')}.json`);
  }
}
