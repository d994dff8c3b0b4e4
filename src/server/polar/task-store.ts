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

  constructor(stateDir: string | undefined) {
    this.dir = stateDir ? join(stateDir, 'polar', 'tasks') : null;
  }

  get persistent(): boolean {
    return this.dir !== null;
  }

  /** Writes the record; resolves once it is on disk. Rejects on an I/O error (the caller logs it). */
  async save(rec: StoredTask): Promise<void> {
    if (!this.dir) return;
    this.ready ??= mkdir(this.dir, { recursive: true, mode: 0o700 }).then(() => undefined);
    await this.ready;
    const file = this.file(rec.status.task_id);
    const tmp = `${file}.${process.pid}.${Date.now()}.tmp`;
    await writeFile(tmp, JSON.stringify(rec), { mode: 0o600 });
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
