import { readFile } from 'node:fs/promises';
import { didYouMean } from '../args.js';
import { routesDataSource } from '../../handlers/registry.js';
import { ValidationError } from '../../errors.js';
import { InstanceSchema, SamplingParamsSchema, type Instance, type SamplingParams } from '../../protocol/instance.js';

/** One task of a task file: the instance and its own sampling params, if the line carried any. */
export interface TaskLine {
  /** 1-based line number in the file. */
  line: number;
  instance: Instance;
  sampling: SamplingParams | undefined;
}

/**
 * Reads a task file: JSON Lines, one instance per line (blank lines and lines starting with `#`
 * are skipped). A line may also be a ProRL `/process` body, `{"instance": {...},
 * "sampling_params": {...}}`. Every `data_source` must be one of `known`.
 *
 * Throws {@link ValidationError} with a message naming the problem and the line: a missing
 * file, a JSON array (a common mistake: JSON, not JSON Lines), bad JSON on line N, a line that
 * is not an instance, an unknown data_source (with the closest known one), or an empty file.
 */
export async function loadTaskFile(path: string, known: ReadonlySet<string>): Promise<TaskLine[]> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === 'ENOENT' ? 'no such file' : code === 'EISDIR' ? 'it is a directory' : (err as Error).message;
    throw new ValidationError(`cannot read task file ${path}: ${why}`, [{ path: 'TASKS', message: why }]);
  }
  // A whole JSON array (`[{...}, {...}]`) fails on its first line as "bad JSON", which does not
  // say what to do: name the format and the one-line conversion instead.
  if (text.trimStart().startsWith('[')) {
    const why = 'a JSON array; rollout run reads JSON Lines (one instance per line)';
    throw new ValidationError(`${path} is ${why}: convert it with  jq -c '.[]' ${path} > tasks.jsonl`, [{ path: 'TASKS', message: why }]);
  }
  const tasks: TaskLine[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const raw = (lines[i] as string).trim();
    if (!raw || raw.startsWith('#')) continue;
    const n = i + 1;
    let value: unknown;
    try {
      value = JSON.parse(raw);
    } catch (err) {
      throw new ValidationError(`${path}: bad JSON on line ${n}: ${(err as Error).message}`, [{ path: `line ${n}`, message: 'bad JSON' }]);
    }
    let instanceValue = value;
    let samplingValue: unknown;
    if (value && typeof value === 'object' && !Array.isArray(value) && 'instance' in value && !('data_source' in value)) {
      instanceValue = (value as { instance: unknown }).instance;
      samplingValue = (value as { sampling_params?: unknown }).sampling_params;
    }
    const inst = InstanceSchema.safeParse(instanceValue);
    if (!inst.success) {
      const issue = inst.error.issues[0];
      const field = issue?.path.map(String).join('.') || '(line)';
      throw new ValidationError(`${path}: line ${n} is not a task instance: field '${field}': ${issue?.message}`, [{ path: `line ${n}.${field}`, message: issue?.message ?? 'invalid' }]);
    }
    if (!routesDataSource(known, inst.data.data_source)) {
      const list = [...known].sort();
      const guess = didYouMean(inst.data.data_source, list);
      throw new ValidationError(`${path}: line ${n}: unknown data_source '${inst.data.data_source}'${guess ? ` (did you mean ${guess}?)` : ''} (known: ${list.join(', ')})`, [
        { path: `line ${n}.data_source`, message: 'unknown data_source' },
      ]);
    }
    let sampling: SamplingParams | undefined;
    if (samplingValue !== undefined) {
      const sp = SamplingParamsSchema.safeParse(samplingValue);
      if (!sp.success) {
        const issue = sp.error.issues[0];
        throw new ValidationError(`${path}: line ${n}: bad sampling_params: field '${issue?.path.map(String).join('.')}': ${issue?.message}`, [
          { path: `line ${n}.sampling_params`, message: issue?.message ?? 'invalid' },
        ]);
      }
      sampling = sp.data;
    }
    tasks.push({ line: n, instance: inst.data, sampling });
  }
  if (tasks.length === 0) throw new ValidationError(`${path}: no tasks in the file`, [{ path: 'TASKS', message: 'empty' }]);
  return tasks;
}
