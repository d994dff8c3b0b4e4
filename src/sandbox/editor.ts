import type { EditorRequest, EditorResult } from './sandbox.js';
import { listDir, readBounded, scanLines } from './bounded-read.js';
import { WorkspaceFs, WorkspaceFsError, closeFd, openChildDir, overwrite, type WorkspaceFsOptions } from './workspace-fs.js';

const SNIPPET_LINES = 4;
const MAX_VIEW_CHARS = 16_000;
/** How far `view` reads into a file looking for the requested lines (a 900 MB file stays 64 MiB of reads, never memory). */
const MAX_SCAN_BYTES = 64 * 1024 * 1024;
/** Largest file `str_replace` / `insert` edit (they hold it whole, and its undo copy). */
export const MAX_EDIT_BYTES = 8 * 1024 * 1024;
/** Entries listed per directory by `view` of a directory. */
const MAX_LIST_ENTRIES = 1000;
const MAX_HISTORY = 20;
/** Undo copies kept per editor, in bytes: the oldest go first beyond it. */
const MAX_HISTORY_BYTES = 32 * 1024 * 1024;

/**
 * The `str_replace_editor` tool (OpenHands semantics) on a sandbox's workspace: `view`,
 * `create`, `str_replace`, `insert`, `undo_edit`. Runs in the sandbox host, not in the sandbox:
 * every file is reached through {@link WorkspaceFs}, which opens each path component relative to
 * its parent's fd without following links (links inside the workspace are resolved by hand and
 * stay inside), checks types after open, and never blocks the host on a FIFO. Reads are
 * bounded: `view` streams and stops at what it shows, edits refuse files over
 * {@link MAX_EDIT_BYTES}. Refusals are results with `error: true`, never throws; no message
 * carries a host path.
 */
export class Editor {
  private readonly files: WorkspaceFs;
  private readonly history = new Map<string, (string | null)[]>();
  private historyBytes = 0;
  private queue: Promise<void> = Promise.resolve();

  /**
   * @param workdir the host directory bound at /workspace.
   * @param opts the workspace root's fd held since the sandbox started, and the sandbox's host
   *   uid whose rights every call is checked against (workspace-fs.ts): the editor is the
   *   sandbox user's tool, so it reads and writes only what that user could, through paths the
   *   sandbox cannot redirect.
   */
  constructor(workdir: string, opts: WorkspaceFsOptions = {}) {
    this.files = new WorkspaceFs(workdir, opts);
  }

  /**
   * Runs one editor command. Commands of one editor run one at a time, in order: reads are
   * asynchronous now, and two edits of one file must not interleave (as they never did when
   * the editor was synchronous).
   */
  run(req: EditorRequest): Promise<EditorResult> {
    const next = this.queue.then(() => this.runNow(req));
    this.queue = next.then(
      () => undefined,
      () => undefined,
    );
    return next;
  }

  private async runNow(req: EditorRequest): Promise<EditorResult> {
    try {
      switch (req.command) {
        case 'view':
          return await this.view(req.path, req.view_range);
        case 'create':
          return await this.create(req.path, req.file_text);
        case 'str_replace':
          return await this.strReplace(req.path, req.old_str, req.new_str ?? '');
        case 'insert':
          return await this.insert(req.path, req.insert_line, req.new_str);
        case 'undo_edit':
          return await this.undo(req.path);
      }
    } catch (err) {
      if (err instanceof WorkspaceFsError) return fail(err.message);
      // Anything else is ours; its message may name host paths, so only its code goes out.
      const code = (err as NodeJS.ErrnoException).code;
      return fail(`${req.command} failed on ${JSON.stringify(req.path)}${code ? ` (${code})` : ''}.`);
    }
  }

  private async view(p: string, range?: [number, number]): Promise<EditorResult> {
    const what = this.files.stat(p);
    if (what.kind === 'missing') return fail(`The path ${what.shown} does not exist.`);
    if (what.kind === 'dir') {
      if (range) return fail('view_range is not allowed when path points to a directory.');
      return this.listing(p);
    }
    const file = this.files.openFile(p, 'read');
    try {
      const [start, last] = range ?? [1, -1];
      if (range && (start < 1 || (last !== -1 && last < start))) return fail(`Invalid view_range [${start}, ${last}]: the first line must be at least 1 and the last -1 or at least the first.`);
      const end = last === -1 ? Infinity : last;
      const out: string[] = [];
      let chars = 0;
      const scan = await scanLines(
        file.fd,
        (line, n) => {
          if (n < start) return true;
          if (n > end) return false;
          const l = `${String(n).padStart(6)}\t${line}`;
          out.push(l);
          chars += l.length + 1;
          return chars <= MAX_VIEW_CHARS;
        },
        { maxScanBytes: MAX_SCAN_BYTES, maxLineChars: MAX_VIEW_CHARS },
      );
      if (scan.eof && range) {
        if (start > scan.lines) return fail(`Invalid view_range [${start}, ${last}]: the first line must be between 1 and ${scan.lines}.`);
        if (end !== Infinity && end > scan.lines) return fail(`Invalid view_range [${start}, ${last}]: the last line must be -1 or between ${start} and ${scan.lines}.`);
      }
      if (out.length === 0 && !scan.eof) {
        return fail(`The file ${file.shown} is ${file.size} bytes; line ${start} lies beyond the first ${MAX_SCAN_BYTES >> 20} MiB the editor reads. Use bash (sed -n '${start},${start + 50}p') for it.`);
      }
      let text = out.join('\n');
      const cut = text.length > MAX_VIEW_CHARS || (!scan.eof && chars > MAX_VIEW_CHARS);
      if (text.length > MAX_VIEW_CHARS) text = text.slice(0, MAX_VIEW_CHARS);
      if (cut) text += `\n[File content truncated (the file is ${file.size} bytes); use view_range to see more.]`;
      return ok(`Here's the result of running \`cat -n\` on ${file.shown}:\n${text}\n`);
    } finally {
      closeFd(file.fd);
    }
  }

  private async listing(p: string): Promise<EditorResult> {
    const root = this.files.openDir(p);
    const lines: string[] = [];
    let truncated = false;
    const walk = async (fd: number, shown: string, depth: number): Promise<void> => {
      const list = await listDir(fd, MAX_LIST_ENTRIES);
      truncated ||= list.truncated;
      for (const e of list.entries) {
        if (e.name.startsWith('.')) continue;
        const child = `${shown}/${e.name}`;
        lines.push(child + (e.isDir ? '/' : ''));
        if (!e.isDir || depth >= 2) continue;
        // A directory swapped for a link since the listing is simply not entered.
        const sub = openChildDir(fd, e.name);
        if (sub === null) continue;
        // A directory its user cannot list is shown, not entered (as `find` would).
        if (!this.files.mayList(sub)) {
          closeFd(sub);
          continue;
        }
        try {
          await walk(sub, child, depth + 1);
        } finally {
          closeFd(sub);
        }
      }
    };
    try {
      await walk(root.fd, root.shown, 1);
    } finally {
      closeFd(root.fd);
    }
    const note = truncated ? `\n[Listing truncated: at most ${MAX_LIST_ENTRIES} entries per directory are shown; use bash (ls, find) for the rest.]` : '';
    return ok(`Files and directories up to 2 levels deep in ${root.shown}, excluding hidden items:\n${root.shown}/\n${lines.join('\n')}\n${note}`);
  }

  private async create(p: string, text: string): Promise<EditorResult> {
    let shown: string;
    try {
      shown = (await this.files.writeFile(p, text, { exclusive: true })).shown;
    } catch (err) {
      if (err instanceof WorkspaceFsError && (err.code === 'EEXIST' || err.code === 'EISDIR')) {
        return fail(`File already exists at: ${this.files.stat(p).shown}. Cannot overwrite files using command \`create\`.`);
      }
      throw err;
    }
    this.remember(shown, null);
    return ok(`File created successfully at: ${shown}`);
  }

  /** Reads a whole file for an edit and hands it to `edit`, which returns the new content or a refusal. */
  private async edit(p: string, edit: (content: string, shown: string) => { updated: string; result: EditorResult } | EditorResult): Promise<EditorResult> {
    const file = this.files.openFile(p, 'write');
    try {
      if (file.size > MAX_EDIT_BYTES) return fail(`The file ${file.shown} is ${file.size} bytes, over the editor's ${MAX_EDIT_BYTES >> 20} MiB limit for edits; use bash (sed, python) for it.`);
      const { buf, truncated } = await readBounded(file.fd, MAX_EDIT_BYTES);
      if (truncated) return fail(`The file ${file.shown} grew past the editor's ${MAX_EDIT_BYTES >> 20} MiB limit for edits; use bash for it.`);
      const content = buf.toString('utf8');
      const r = edit(content, file.shown);
      if (!('updated' in r)) return r;
      await overwrite(file.fd, r.updated, file.shown);
      this.remember(file.shown, content);
      return r.result;
    } finally {
      closeFd(file.fd);
    }
  }

  private strReplace(p: string, oldStr: string, newStr: string): Promise<EditorResult> {
    return this.edit(p, (content, shown) => {
      if (oldStr === '') return fail('old_str must not be empty.');
      const positions: number[] = [];
      for (let i = content.indexOf(oldStr); i >= 0; i = content.indexOf(oldStr, i + 1)) positions.push(i);
      if (positions.length === 0) return fail(`No replacement was performed: old_str did not appear verbatim in ${shown}.`);
      if (positions.length > 1) {
        const lines = positions.map((i) => content.slice(0, i).split('\n').length);
        return fail(`No replacement was performed: old_str appears ${positions.length} times in ${shown} (lines ${lines.join(', ')}). Make it unique by including more context.`);
      }
      const at = positions[0]!;
      const updated = content.slice(0, at) + newStr + content.slice(at + oldStr.length);
      const line = content.slice(0, at).split('\n').length;
      return { updated, result: ok(`The file ${shown} has been edited. ${snippet(updated, line, newStr.split('\n').length)}Review the changes and make sure they are as expected.`) };
    });
  }

  private insert(p: string, after: number, newStr: string): Promise<EditorResult> {
    return this.edit(p, (content, shown) => {
      const lines = content.split('\n');
      if (after < 0 || after > lines.length) return fail(`Invalid insert_line ${after}: it must be between 0 and ${lines.length}.`);
      const inserted = newStr.split('\n');
      const updated = [...lines.slice(0, after), ...inserted, ...lines.slice(after)].join('\n');
      return { updated, result: ok(`The file ${shown} has been edited. ${snippet(updated, after + 1, inserted.length)}Review the changes and make sure they are as expected.`) };
    });
  }

  private async undo(p: string): Promise<EditorResult> {
    const shown = this.files.stat(p).shown;
    const stack = this.history.get(shown);
    if (!stack || stack.length === 0) return fail(`No edit history found for ${shown}.`);
    const prev = stack.pop()!;
    this.historyBytes -= prev?.length ?? 0;
    if (prev === null) {
      this.files.unlink(p);
      return ok(`Last edit to ${shown} undone: the file created by \`create\` was removed.`);
    }
    await this.files.writeFile(p, prev, { exclusive: false });
    return ok(`Last edit to ${shown} undone successfully. ${snippet(prev, 1, 0)}`);
  }

  private remember(shown: string, content: string | null): void {
    const stack = this.history.get(shown) ?? [];
    stack.push(content);
    this.historyBytes += content?.length ?? 0;
    if (stack.length > MAX_HISTORY) this.historyBytes -= stack.shift()?.length ?? 0;
    this.history.set(shown, stack);
    // Bounded memory: drop the oldest copies of any file (a Map iterates in insertion order).
    for (const [key, s] of this.history) {
      if (this.historyBytes <= MAX_HISTORY_BYTES) break;
      while (s.length && this.historyBytes > MAX_HISTORY_BYTES) this.historyBytes -= s.shift()?.length ?? 0;
      if (!s.length) this.history.delete(key);
    }
  }
}

function numbered(lines: string[], first: number): string {
  return lines.map((l, i) => `${String(first + i).padStart(6)}\t${l}`).join('\n');
}

function snippet(content: string, line: number, span: number): string {
  const lines = content.split('\n');
  const start = Math.max(1, line - SNIPPET_LINES);
  const end = Math.min(lines.length, line + span - 1 + SNIPPET_LINES);
  return `Here's a snippet of the file (cat -n):\n${numbered(lines.slice(start - 1, end), start)}\n`;
}

function ok(output: string): EditorResult {
  return { output, error: false };
}
function fail(output: string): EditorResult {
  return { output, error: true };
}
