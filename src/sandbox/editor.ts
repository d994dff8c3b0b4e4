import fs from 'node:fs';
import path from 'node:path';
import type { EditorRequest, EditorResult } from './sandbox.js';
import { resolveInWorkspace, toWorkspacePath } from './workspace-path.js';

const SNIPPET_LINES = 4;
const MAX_VIEW_CHARS = 16_000;
const MAX_HISTORY = 20;

/**
 * The `str_replace_editor` tool (OpenHands semantics) on the host-side path of /workspace:
 * `view`, `create`, `str_replace`, `insert`, `undo_edit`. Runs in the sandbox host, not in the
 * sandbox: it is plain file I/O, and every path is confined to the workspace with symlinks
 * resolved ({@link resolveInWorkspace}). Refusals are results with `error: true`, never throws.
 */
export class Editor {
  private readonly history = new Map<string, (string | null)[]>();

  constructor(private readonly workdir: string) {}

  /** Runs one editor command. */
  run(req: EditorRequest): EditorResult {
    const host = resolveInWorkspace(this.workdir, req.path);
    if (!host) return fail(`The path ${req.path} is outside the workspace (/workspace); it was refused.`);
    const shown = toWorkspacePath(this.workdir, host);
    try {
      switch (req.command) {
        case 'view':
          return this.view(host, shown, req.view_range);
        case 'create':
          return this.create(host, shown, req.file_text);
        case 'str_replace':
          return this.strReplace(host, shown, req.old_str, req.new_str ?? '');
        case 'insert':
          return this.insert(host, shown, req.insert_line, req.new_str);
        case 'undo_edit':
          return this.undo(host, shown);
      }
    } catch (err) {
      return fail(`${req.command} failed on ${shown}: ${(err as Error).message}`);
    }
  }

  private view(host: string, shown: string, range?: [number, number]): EditorResult {
    if (!fs.existsSync(host)) return fail(`The path ${shown} does not exist.`);
    if (fs.statSync(host).isDirectory()) {
      if (range) return fail('view_range is not allowed when path points to a directory.');
      const lines: string[] = [];
      const walk = (dir: string, depth: number): void => {
        for (const e of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
          if (e.name.startsWith('.')) continue;
          const p = path.join(dir, e.name);
          lines.push(toWorkspacePath(this.workdir, p) + (e.isDirectory() ? '/' : ''));
          if (e.isDirectory() && depth < 2) walk(p, depth + 1);
        }
      };
      walk(host, 1);
      return ok(`Files and directories up to 2 levels deep in ${shown}, excluding hidden items:\n${shown}/\n${lines.join('\n')}\n`);
    }
    const content = fs.readFileSync(host, 'utf8');
    const all = content.split('\n');
    let start = 1;
    let end = all.length;
    if (range) {
      const [a, b] = range;
      if (a < 1 || a > all.length) return fail(`Invalid view_range [${a}, ${b}]: the first line must be between 1 and ${all.length}.`);
      if (b !== -1 && (b < a || b > all.length)) return fail(`Invalid view_range [${a}, ${b}]: the last line must be -1 or between ${a} and ${all.length}.`);
      start = a;
      end = b === -1 ? all.length : b;
    }
    let text = numbered(all.slice(start - 1, end), start);
    if (text.length > MAX_VIEW_CHARS) text = `${text.slice(0, MAX_VIEW_CHARS)}\n[File content truncated; use view_range to see more.]`;
    return ok(`Here's the result of running \`cat -n\` on ${shown}:\n${text}\n`);
  }

  private create(host: string, shown: string, text: string): EditorResult {
    if (fs.existsSync(host)) return fail(`File already exists at: ${shown}. Cannot overwrite files using command \`create\`.`);
    fs.mkdirSync(path.dirname(host), { recursive: true });
    this.remember(host, null);
    fs.writeFileSync(host, text);
    return ok(`File created successfully at: ${shown}`);
  }

  private strReplace(host: string, shown: string, oldStr: string, newStr: string): EditorResult {
    if (!isFile(host)) return fail(`The path ${shown} is not a file.`);
    const content = fs.readFileSync(host, 'utf8');
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
    this.remember(host, content);
    fs.writeFileSync(host, updated);
    const line = content.slice(0, at).split('\n').length;
    return ok(`The file ${shown} has been edited. ${snippet(updated, line, newStr.split('\n').length)}Review the changes and make sure they are as expected.`);
  }

  private insert(host: string, shown: string, after: number, newStr: string): EditorResult {
    if (!isFile(host)) return fail(`The path ${shown} is not a file.`);
    const content = fs.readFileSync(host, 'utf8');
    const lines = content.split('\n');
    if (after < 0 || after > lines.length) return fail(`Invalid insert_line ${after}: it must be between 0 and ${lines.length}.`);
    const inserted = newStr.split('\n');
    const updated = [...lines.slice(0, after), ...inserted, ...lines.slice(after)].join('\n');
    this.remember(host, content);
    fs.writeFileSync(host, updated);
    return ok(`The file ${shown} has been edited. ${snippet(updated, after + 1, inserted.length)}Review the changes and make sure they are as expected.`);
  }

  private undo(host: string, shown: string): EditorResult {
    const stack = this.history.get(host);
    if (!stack || stack.length === 0) return fail(`No edit history found for ${shown}.`);
    const prev = stack.pop()!;
    if (prev === null) {
      fs.rmSync(host, { force: true });
      return ok(`Last edit to ${shown} undone: the file created by \`create\` was removed.`);
    }
    fs.writeFileSync(host, prev);
    return ok(`Last edit to ${shown} undone successfully. ${snippet(prev, 1, 0)}`);
  }

  private remember(host: string, content: string | null): void {
    const stack = this.history.get(host) ?? [];
    stack.push(content);
    if (stack.length > MAX_HISTORY) stack.shift();
    this.history.set(host, stack);
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

function isFile(p: string): boolean {
  try {
    return fs.statSync(p).isFile();
  } catch {
    return false;
  }
}

function ok(output: string): EditorResult {
  return { output, error: false };
}
function fail(output: string): EditorResult {
  return { output, error: true };
}
