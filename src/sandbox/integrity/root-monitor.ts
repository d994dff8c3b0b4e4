import fs from 'node:fs';
import path from 'node:path';
import type { IntegrityViolation } from '../../protocol/integrity.js';

/**
 * Files outside the workspace that change how Python and the tests run: start-up hooks
 * (`sitecustomize.py`, `usercustomize.py`, `*.pth` — a .pth line can run code, and `pip install`
 * writes one), and programs on PATH (a `pytest` or `python3` replaced).
 */
const HOOK_NAME = /(^|\/)(sitecustomize\.py|usercustomize\.py|[^/]*\.pth)$/;
const PATH_DIR = /^(usr\/local\/bin|usr\/local\/sbin|usr\/bin|usr\/sbin|bin|sbin|opt\/[^/]+\/bin|opt\/[^/]+\/envs\/[^/]+\/bin)\/[^/]+$|(^|\/)\.local\/bin\/[^/]+$/;
/** The upper dir of an image sandbox holds only what it changed, so it is small; bounded all the same. */
const MAX_ENTRIES = 20_000;

interface Rec {
  whiteout: boolean;
  size: number;
  mtimeMs: number;
  ino: number;
}

/**
 * Watches an image sandbox's overlay upper dir — exactly what the sandbox changed in its root —
 * outside the workspace (which the {@link FileMonitor} covers) for writes to Python's start-up
 * hooks and to programs on PATH. A change in the upper dir is a new file or a copy-up of an image
 * file; a whiteout (a 0/0 character device) is a deletion. Reported as `create-protected` /
 * `edit-protected` / `delete-protected` with the absolute path in the sandbox's root.
 * O(entries of the upper dir) per observation, bounded by {@link MAX_ENTRIES}.
 */
export class RootMonitor {
  private prev = new Map<string, Rec>();
  truncated = false;

  /** @param workspace the workspace's absolute path in the root (e.g. `/testbed`), skipped. */
  constructor(
    private readonly upper: string,
    private readonly workspace: string,
  ) {}

  start(): void {
    this.prev = this.scan();
  }

  observe(turn: number): IntegrityViolation[] {
    const now = this.scan();
    const out: IntegrityViolation[] = [];
    for (const [rel, r] of now) {
      if (!HOOK_NAME.test(rel) && !PATH_DIR.test(rel)) continue;
      const before = this.prev.get(rel);
      if (before && before.whiteout === r.whiteout && before.size === r.size && before.mtimeMs === r.mtimeMs && before.ino === r.ino) continue;
      const where = `/${rel}`;
      if (r.whiteout) out.push({ kind: 'delete-protected', turn, path: where, detail: 'deleted from the image (outside the workspace)' });
      else out.push({ kind: before ? 'edit-protected' : 'create-protected', turn, path: where, detail: `written outside the workspace (${r.size} bytes): ${HOOK_NAME.test(rel) ? 'a Python start-up hook' : 'a program on PATH'}` });
    }
    this.prev = now;
    return out;
  }

  private scan(): Map<string, Rec> {
    const map = new Map<string, Rec>();
    const skip = this.workspace.replace(/^\/+/, '');
    const stack = [''];
    while (stack.length > 0) {
      const dir = stack.pop()!;
      let list: fs.Dirent[];
      try {
        list = fs.readdirSync(dir === '' ? this.upper : path.join(this.upper, dir), { withFileTypes: true });
      } catch {
        continue;
      }
      for (const d of list) {
        const rel = dir === '' ? d.name : `${dir}/${d.name}`;
        if (rel === skip) continue;
        if (map.size >= MAX_ENTRIES) {
          this.truncated = true;
          return map;
        }
        let st: fs.Stats;
        try {
          st = fs.lstatSync(path.join(this.upper, rel));
        } catch {
          continue;
        }
        if (st.isDirectory()) {
          stack.push(rel);
          continue;
        }
        map.set(rel, { whiteout: st.isCharacterDevice() && st.rdev === 0, size: st.size, mtimeMs: st.mtimeMs, ino: st.ino });
      }
    }
    return map;
  }
}
