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
 * Watches a workspace directory for changes to protected paths: a baseline at {@link start}
 * (after the sandbox's setup, before the agent's first action), then one incremental scan per
 * action. A directory's mtime changes exactly when an entry is added, removed or renamed in it,
 * so a scan lstat's every known directory and lists again only those whose record changed
 * (new entries are created, missing ones deleted, a new directory is scanned whole), then
 * lstat's the protected entries and hashes those whose record changed. The work per action is
 * O(directories + protected paths + entries of the changed directories), not O(files): measured
 * in bench/integrity.ts on a 5,000-file workspace. Never follows a link: entries are lstat'ed,
 * directories are descended only when they are real directories, and a protected file is
 * opened with O_NOFOLLOW and checked to be a regular file after the open. `.git` directories are
 * not descended (git rewrites its index on every `git status`; `.git` is a secret, not protected).
 * The work is bounded by `maxEntries` known entries and `maxHashBytes` per hashed file.
 */
export class FileMonitor {
  /** Every known entry (workspace-relative path → record). */
  private entries = new Map<string, Entry>();
  /** The names listed in each known directory ('' is the root). */
  private listings = new Map<string, Set<string>>();
  private truncated = false;
  private started = false;

  constructor(
    private readonly root: string,
    private readonly protect: GlobSet,
    private readonly opts: FileMonitorOptions = DEFAULT_FILE_MONITOR_OPTIONS,
  ) {}

  /** Takes the baseline. @returns the entries it knows and whether it stopped at `maxEntries`. */
  start(): { entries: number; truncated: boolean; ms: number } {
    const t0 = performance.now();
    const rootSt = this.lstat('');
    if (rootSt) this.entries.set('', rootSt);
    this.walk('', () => undefined);
    for (const [rel, e] of this.entries) if (e.type === 'file' && rel !== '' && this.protect.matches(rel)) e.sha = this.hash(rel, e);
    this.started = true;
    return { entries: this.entries.size - 1, truncated: this.truncated, ms: performance.now() - t0 };
  }

  /** Every known workspace entry (relative path and type), for the secret-read marks (host-integrity.ts). */
  *known(): Generator<[string, 'file' | 'dir' | 'link' | 'other']> {
    for (const [rel, e] of this.entries) if (rel !== '') yield [rel, e.type];
  }

  /** Scans once more and reports the violations since the last scan, at `turn`. */
  observe(turn: number): FileObservation {
    if (!this.started) throw new Error('FileMonitor.observe before start');
    const t0 = performance.now();
    const violations: IntegrityViolation[] = [];
    const counts = { created: 0, modified: 0, deleted: 0 };
    const touched = new Set<string>();
    const created = (rel: string, e: Entry): void => {
      counts.created++;
      touched.add(rel);
      if (!this.protect.matches(rel)) return;
      if (e.type === 'file') e.sha = this.hash(rel, e);
      violations.push(e.type === 'link' ? { kind: 'symlink-protected', turn, path: rel, detail: `created as a link to ${this.linkTarget(rel)}` } : { kind: 'create-protected', turn, path: rel, detail: `created (${e.type}, ${e.size} bytes${e.sha ? `, sha256 ${e.sha}` : ''})` });
    };
    for (const [dir, names] of this.listings) {
      if (!this.listings.has(dir)) continue; // removed with its parent during this scan
      const before = this.entries.get(dir);
      const now = this.lstat(dir);
      if (!before || !now || now.type !== 'dir' || sameRecord(before, now)) continue;
      this.entries.set(dir, now);
      let list: string[];
      try {
        list = fs.readdirSync(dir === '' ? this.root : path.join(this.root, dir));
      } catch {
        continue;
      }
      const current = new Set(list);
      for (const name of names) {
        if (current.has(name)) continue;
        names.delete(name);
        this.forget(dir === '' ? name : `${dir}/${name}`, (rel, e) => {
          counts.deleted++;
          touched.add(rel);
          if (this.protect.matches(rel)) violations.push({ kind: 'delete-protected', turn, path: rel, detail: `deleted (${e.type}, ${e.size} bytes${e.sha ? `, sha256 ${e.sha}` : ''})` });
        });
      }
      for (const name of list) {
        if (names.has(name) || this.entries.size >= this.opts.maxEntries) continue;
        const rel = dir === '' ? name : `${dir}/${name}`;
        const e = this.lstat(rel);
        if (!e) continue;
        names.add(name);
        this.entries.set(rel, e);
        created(rel, e);
        if (e.type === 'dir' && name !== '.git') {
          this.listings.set(rel, new Set());
          this.walk(rel, created);
        }
      }
    }
    // Protected entries that stayed: an edit, or a link put in place of the file.
    for (const [rel, before] of this.entries) {
      if (rel === '' || touched.has(rel) || before.type === 'dir' || !this.protect.matches(rel)) continue;
      const e = this.lstat(rel);
      if (!e || sameRecord(before, e)) continue;
      counts.modified++;
      this.entries.set(rel, e);
      if (e.type === 'link' && before.type !== 'link') {
        violations.push({ kind: 'symlink-protected', turn, path: rel, detail: `replaced by a link to ${this.linkTarget(rel)}` });
      } else if (e.type === 'file') {
        e.sha = this.hash(rel, e);
        if (before.type !== 'file' || e.sha !== before.sha || (e.sha === null && (e.size !== before.size || e.mtimeMs !== before.mtimeMs))) {
          violations.push({ kind: 'edit-protected', turn, path: rel, detail: `size ${before.size} → ${e.size}; sha256 ${before.sha ?? '?'} → ${e.sha ?? '?'}` });
        }
      }
    }
    return { violations, ...counts, entries: this.entries.size - 1, truncated: this.truncated, ms: performance.now() - t0 };
  }

  /** Lists `dir` and everything under it into the maps, calling `onEntry` for each new entry. */
  private walk(dir: string, onEntry: (rel: string, e: Entry) => void): void {
    const stack = [dir];
    if (!this.listings.has(dir)) this.listings.set(dir, new Set());
    while (stack.length > 0) {
      const d = stack.pop()!;
      const names = this.listings.get(d)!;
      let list: fs.Dirent[];
      try {
        list = fs.readdirSync(d === '' ? this.root : path.join(this.root, d), { withFileTypes: true });
      } catch {
        continue;
      }
      for (const ent of list) {
        if (this.entries.size >= this.opts.maxEntries) {
          this.truncated = true;
          return;
        }
        const rel = d === '' ? ent.name : `${d}/${ent.name}`;
        const e = this.lstat(rel);
        if (!e) continue;
        names.add(ent.name);
        this.entries.set(rel, e);
        onEntry(rel, e);
        if (e.type === 'dir' && ent.name !== '.git') {
          this.listings.set(rel, new Set());
          stack.push(rel);
        }
      }
    }
  }

  /** Drops `rel` and everything under it, calling `onGone` for each, the path itself first. */
  private forget(rel: string, onGone: (rel: string, e: Entry) => void): void {
    const e = this.entries.get(rel);
    if (!e) return;
    this.entries.delete(rel);
    onGone(rel, e);
    if (!this.listings.has(rel)) return;
    const prefix = `${rel}/`;
    for (const [k, v] of this.entries) {
      if (!k.startsWith(prefix)) continue;
      this.entries.delete(k);
      onGone(k, v);
    }
    for (const k of this.listings.keys()) if (k === rel || k.startsWith(prefix)) this.listings.delete(k);
  }

  private lstat(rel: string): Entry | null {
    try {
      const st = fs.lstatSync(rel === '' ? this.root : path.join(this.root, rel));
      const type = st.isFile() ? 'file' : st.isDirectory() ? 'dir' : st.isSymbolicLink() ? 'link' : 'other';
      return { type, size: st.size, mtimeMs: st.mtimeMs, ctimeMs: st.ctimeMs, ino: st.ino };
    } catch {
      return null;
    }
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
