import { afterEach, describe, expect, it } from 'vitest';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TaskStore, type StoredTask } from '../../../../src/server/polar/task-store.js';
import type { TaskState } from '../../../../src/server/polar/polar-models.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
const rec = (id: string, status: TaskState): StoredTask => ({ status: { task_id: id, status, total_sessions: 1, completed_sessions: 0, results: [], result_paths: [] }, harness: 'shell', model: null, created_at: 1, updated_at: 2 });

describe('TaskStore', () => {
  it('keeps the last of a task\'s writes even when they are not awaited, and names files by a hash of the id', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'polar-store-'));
    dirs.push(dir);
    const store = new TaskStore(dir);
    const id = '../../etc/passwd';
    const writes = [store.save(rec(id, 'running')), store.save(rec(id, 'completed'))];
    await Promise.all(writes);
    expect((await new TaskStore(dir).load(id))?.status.status).toBe('completed');
    expect(readdirSync(join(dir, 'polar', 'tasks'))).toEqual([expect.stringMatching(/^[0-9a-f]{64}\.json$/)]);
    expect(await store.load('other')).toBeNull();
  });

  it('flush waits for every write not awaited, so nothing lands after it (a closed service\'s state dir stays removed)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'polar-store-'));
    dirs.push(dir);
    const store = new TaskStore(dir);
    for (let i = 0; i < 5; i++) void store.save(rec(`t${i}`, i % 2 ? 'running' : 'completed'));
    void store.save(rec('t0', 'cancelled'));
    await store.flush();
    expect(readdirSync(join(dir, 'polar', 'tasks')).filter((f) => f.endsWith('.json'))).toHaveLength(5);
    expect((await store.load('t0'))?.status.status).toBe('cancelled');
    rmSync(join(dir, 'polar'), { recursive: true, force: true });
    await store.flush();
    expect(readdirSync(dir)).toEqual([]);
  });

  it('persists nothing without a state dir', async () => {
    const store = new TaskStore(undefined);
    await store.save(rec('a', 'completed'));
    expect(store.persistent).toBe(false);
    expect(await store.load('a')).toBeNull();
  });
});
