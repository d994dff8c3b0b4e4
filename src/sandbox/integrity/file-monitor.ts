import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { GlobSet, IntegrityViolation } from '../../protocol/integrity.js';

/** Bounds of one scan. */
export interface FileMonitorOptions {
  /** Entries a scan visits at most; past it the scan stops and the monitor is degraded. */
  maxEntries: number;
  /** Bytes of one protected file hashed at most; a larger one is compared by size, mtime and inode only. */
  maxHashBytes: number;
}

export const DEFAULT_FILE_MONITOR_OPTIONS: FileMonitorOptions = Object.freeze({ maxEntries: 50_000, maxHashBytes: 8 * 1024 * 1024 });

/** What one lstat of a workspace entry records. */
interface Entry {
  type: 'file' | 'dir' | 'link' | 'other';
  size: number;
  mtimeMs: number;
  ctimeMs: number;
  ino: number;
  /** sha256 of a protected regular file (null: not hashed — too large or unreadable). */
  sha?: string | null;
}

/** One observation: the violations it found and what the scan cost. */
export interface FileObservation {
  violations: IntegrityViolation[];
  created: number;
  modified: number;
  deleted: number;
  /** Entries the scan visited. */
  entries: number;
  /** True when the scan stopped at `maxEntries`: changes past it are not seen. */
  truncated: boolean;
  /** Time the scan took, in ms. */
  ms: number;
}

/**
 * Watches a workspace directory for changes to protected paths, by scanning it: a baseline at
 * {@link start} (after the sandbox's setup, before the agent's first action), then one scan
 * per action that diffs lstat records against the previous scan and hashes the protected
 * regular files whose record changed. Never follows a link: entries are lstat'ed, directories
 * are descended only when they are real directories, and a protected file is opened with
 * O_NOFOLLOW and checked to be a regular file after the open. `.git` directories are not
 * descended (git rewrites its index on every `git status`; `.git` is a secret, not protected).
 * The work is bounded by `maxEntries` per scan and `maxHashBytes` per hashed file.
 */
export class FileMonitor {
  private prev = new Map<string, Entry>();
  private started = false;

  constructor(
    private readonly root: string,
    private readonly protect: GlobSet,
    private readonly opts: FileMonitorOptions = DEFAULT_FILE_MONITOR_OPTIONS,
  ) {}

  /** Takes the baseline. @returns whether it covered the whole workspace (false: truncated). */
  start(): { entries: number; truncated: boolean; ms: number } {
    const t0 = performance.now();
    const { map, truncated } = this.scan();
    for (const [rel, e] of map) if (e.type === 'file' && this.protect.matches(rel)) e.sha = this.hash(rel, e);
    this.prev = map;
    this.started = true;
    return { entries: map.size, truncated, ms: performance.now() - t0 };
  }

  /** Scans once more and reports the violations since the last scan, at `turn`. */
  observe(turn: number): FileObservation {
    if (!this.started) throw new Error('FileMonitor.observe before start');
    const t0 = performance.now();
    const { map, truncated } = this.scan();
    const violations: IntegrityViolation[] = [];
    let created = 0;
    let modified = 0;
    let deleted = 0;
    for (const [rel, e] of map) {
      const before = this.prev.get(rel);
      const isProtected = this.protect.matches(rel);
      if (!before) {
        created++;
        if (isProtected) {
          if (e.type === 'file') e.sha = this.hash(rel, e);
          violations.push(e.type === 'link' ? { kind: 'symlink-protected', turn, path: rel, detail: `created as a link to ${this.linkTarget(rel)}` } : { kind: 'create-protected', turn, path: rel, detail: `created (${e.type}, ${e.size} bytes${e.sha ? `, sha256 ${e.sha}` : ''})` });
        }
        continue;
      }
      if (sameRecord(before, e)) {
        e.sha = before.sha;
        continue;
      }
      modified++;
      if (!isProtected) continue;
      if (e.type === 'link' && before.type !== 'link') {
        violations.push({ kind: 'symlink-protected', turn, path: rel, detail: `replaced by a link to ${this.linkTarget(rel)}` });
        continue;
      }
      if (e.type === 'file') {
        e.sha = this.hash(rel, e);
        if (before.type !== 'file' || e.sha !== before.sha || (e.sha === null && (e.size !== before.size || e.mtimeMs !== before.mtimeMs))) {
          violations.push({ kind: 'edit-protected', turn, path: rel, detail: `size ${before.size} → ${e.size}; sha256 ${before.sha ?? '?'} → ${e.sha ?? '?'}` });
        }
      }
    }
    for (const [rel, before] of this.prev) {
      if (map.has(rel)) continue;
      deleted++;
      if (this.protect.matches(rel)) {
        violations.push({ kind: 'delete-protected', turn, path: rel, detail: `deleted (${before.type}, ${before.size} bytes${before.sha ? `, sha256 ${before.sha}` : ''})` });
      }
    }
    this.prev = map;
    return { violations, created, modified, deleted, entries: map.size, truncated, ms: performance.now() - t0 };
  }

  private scan(): { map: Map<string, Entry>; truncated: boolean } {
    const map = new Map<string, Entry>();
    const stack: string[] = [''];
    while (stack.length > 0) {
      const dir = stack.pop()!;
      let names: fs.Dirent[];
      try {
        names = fs.readdirSync(dir === '' ? this.root : path.join(this.root, dir), { withFileTypes: true });
      } catch {
        continue; // removed meanwhile, or unreadable: seen as gone by the diff
      }
      for (const d of names) {
        if (map.size >= this.opts.maxEntries) return { map, truncated: true };
        const rel = dir === '' ? d.name : `${dir}/${d.name}`;
        let st: fs.Stats;
        try {
          st = fs.lstatSync(path.join(this.root, rel));
        } catch {
          continue;
        }
        const type = st.isFile() ? 'file' : st.isDirectory() ? 'dir' : st.isSymbolicLink() ? 'link' : 'other';
        map.set(rel, { type, size: st.size, mtimeMs: st.mtimeMs, ctimeMs: st.ctimeMs, ino: st.ino });
        if (type === 'dir' && d.name !== '.git') stack.push(rel);
      }
    }
    return { map, truncated: false };
  }

  /** sha256 of a regular file opened without following a link, or null when it is not one, too large or unreadable. */
  private hash(rel: string, e: Entry): string | null {
    if (e.size > this.opts.maxHashBytes) return null;
    let fd: number;
    try {
      fd = fs.openSync(path.join(this.root, rel), fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
    } catch {
      return null;
    }
    try {
      const st = fs.fstatSync(fd);
      if (!st.isFile() || st.size > this.opts.maxHashBytes) return null;
      const h = createHash('sha256');
      const buf = Buffer.allocUnsafe(64 * 1024);
      let total = 0;
      for (;;) {
        const n = fs.readSync(fd, buf, 0, buf.length, null);
        if (n <= 0) break;
        total += n;
        if (total > this.opts.maxHashBytes) return null;
        h.update(buf.subarray(0, n));
      }
      return h.digest('hex');
    } catch {
      return null;
    } finally {
      fs.closeSync(fd);
    }
  }

  private linkTarget(rel: string): string {
    try {
      return fs.readlinkSync(path.join(this.root, rel)).slice(0, 200);
    } catch {
      return '?';
    }
  }
}

function sameRecord(a: Entry, b: Entry): boolean {
  return a.type === b.type && a.size === b.size && a.mtimeMs === b.mtimeMs && a.ctimeMs === b.ctimeMs && a.ino === b.ino;
}
