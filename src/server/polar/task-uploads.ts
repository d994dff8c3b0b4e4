import { lstat, readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { HttpError } from '../http-error.js';
import { confine } from '../path-roots.js';
import type { TaskRequest } from './polar-models.js';
import type { TaskUploads } from './task-instance.js';

/** Bytes one task may upload from the host (all prepare steps together). */
const MAX_UPLOAD_BYTES = 8 * 1024 * 1024;
/** Bytes of a Harbor `tests/` directory: it travels inside the eval command. */
const MAX_TESTS_BYTES = 1024 * 1024;
const MAX_FILES = 2000;

/**
 * Reads the host files a task names — `upload_file` / `upload_dir` sources of `runtime.prepare`
 * and Harbor's `evaluator.config.tests_dir` — each confined to the service's `--path-root`s
 * (none configured: any host path is refused, 400 naming the field). Symbolic links are refused
 * (never followed), files must be UTF-8 text, and the sizes are bounded (413 beyond).
 */
export async function readTaskUploads(task: TaskRequest, roots: readonly string[]): Promise<TaskUploads> {
  const prepare = new Map<number, Map<string, string>>();
  const budget = { bytes: MAX_UPLOAD_BYTES, files: MAX_FILES };
  const steps = task.runtime?.prepare ?? [];
  for (let i = 0; i < steps.length; i++) {
    const s = steps[i]!;
    if (s.type === 'exec') continue;
    const field = `runtime.prepare.${i}.source`;
    const path = confine(s.source!, roots, field);
    prepare.set(i, await readTree(path, s.type === 'upload_dir', field, budget));
  }
  let harborTests: Map<string, string> | null = null;
  if (task.evaluator?.strategy === 'harbor') {
    const dir = task.evaluator.config['tests_dir'];
    const field = 'evaluator.config.tests_dir';
    if (typeof dir !== 'string' || dir.trim() === '') throw new HttpError(400, 'VALIDATION', 'invalid TaskRequest', { issues: [{ path: field, message: "harbor evaluator requires a non-empty 'tests_dir'" }] });
    harborTests = await readTree(confine(dir.trim(), roots, field), true, field, { bytes: MAX_TESTS_BYTES, files: MAX_FILES });
  }
  return { prepare, harborTests };
}

async function readTree(path: string, dir: boolean, field: string, budget: { bytes: number; files: number }): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const st = await lstat(path).catch(() => null);
  if (!st) throw bad(field, 'does not exist');
  if (dir && !st.isDirectory()) throw bad(field, 'is not a directory');
  if (!dir && !st.isFile()) throw bad(field, 'is not a regular file');
  if (!dir) {
    out.set('', await readText(path, field, budget));
    return out;
  }
  const walk = async (abs: string, rel: string): Promise<void> => {
    for (const e of await readdir(abs, { withFileTypes: true })) {
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (e.isSymbolicLink()) throw bad(field, `holds a symbolic link (${r.slice(0, 200)}); links are not followed`);
      if (e.isDirectory()) await walk(join(abs, e.name), r);
      else if (e.isFile()) out.set(r, await readText(join(abs, e.name), field, budget));
    }
  };
  await walk(path, '');
  return out;
}

async function readText(path: string, field: string, budget: { bytes: number; files: number }): Promise<string> {
  const st = await lstat(path);
  budget.bytes -= st.size;
  budget.files -= 1;
  if (budget.bytes < 0 || budget.files < 0) throw new HttpError(413, 'UPLOAD_TOO_LARGE', `${field}: the task's uploads exceed the limit (${MAX_UPLOAD_BYTES} bytes, ${MAX_FILES} files; Harbor tests ${MAX_TESTS_BYTES} bytes)`, { issues: [{ path: field, message: 'too large' }] });
  const buf = await readFile(path);
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(buf);
  } catch {
    throw bad(field, 'holds a file that is not UTF-8 text');
  }
}

function bad(field: string, message: string): HttpError {
  return new HttpError(400, 'VALIDATION', `invalid TaskRequest: ${field} ${message}`, { issues: [{ path: field, message }] });
}
