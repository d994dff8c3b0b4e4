import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ValidationError } from '../../../src/errors.js';
import { loadTaskFile } from '../../../src/cli/commands/run-tasks-file.js';

const known = new Set(['math', 'shell']);
let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'run-tasks-file-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});
async function file(text: string): Promise<string> {
  const p = join(dir, 't.jsonl');
  await writeFile(p, text);
  return p;
}

describe('loadTaskFile', () => {
  it('reads one instance per line, skipping blank and comment lines', async () => {
    const tasks = await loadTaskFile(await file('# c\n{"data_source":"math","problem":"p","answer":"1"}\n\n{"data_source":"shell","prompt":"p","eval_command":"true"}\n'), known);
    expect(tasks.map((t) => [t.line, t.instance.data_source])).toEqual([
      [2, 'math'],
      [4, 'shell'],
    ]);
  });
  it('accepts a ProRL /process body with its sampling_params', async () => {
    const tasks = await loadTaskFile(await file('{"instance":{"data_source":"math"},"sampling_params":{"max_iterations":3}}\n'), known);
    expect(tasks[0]?.sampling?.max_iterations).toBe(3);
  });
  it('names the line of bad JSON', async () => {
    await expect(loadTaskFile(await file('{"data_source":"math"}\n{oops\n'), known)).rejects.toThrow(/bad JSON on line 2/);
  });
  it('says a JSON array is not JSON Lines, with the conversion, instead of "bad JSON on line 1"', async () => {
    const p = await file('[\n  {"data_source":"math","problem":"p","answer":"1"}\n]\n');
    const err = await loadTaskFile(p, known).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as Error).message).toBe(`${p} is a JSON array; rollout run reads JSON Lines (one instance per line): convert it with  jq -c '.[]' ${p} > tasks.jsonl`);
  });
  it('suggests the closest known data_source for a misspelt one', async () => {
    await expect(loadTaskFile(await file('{"data_source":"maths"}\n'), known)).rejects.toThrow("line 1: unknown data_source 'maths' (did you mean math?) (known: math, shell)");
  });
  it('names an unknown data_source and its line', async () => {
    await expect(loadTaskFile(await file('{"data_source":"chess"}\n'), known)).rejects.toThrow(/line 1: unknown data_source 'chess'/);
  });
  it('takes a line that lacks data_source for swebench, as the reference does', async () => {
    await expect(loadTaskFile(await file('{"problem":"x"}\n'), known)).rejects.toThrow(/line 1: unknown data_source 'swebench'/);
  });
  it('says when the file does not exist', async () => {
    await expect(loadTaskFile(join(dir, 'missing.jsonl'), known)).rejects.toThrow(/cannot read task file .*missing.jsonl: no such file/);
  });
  it('refuses an empty file with a ValidationError', async () => {
    await expect(loadTaskFile(await file('\n\n'), known)).rejects.toBeInstanceOf(ValidationError);
  });
});
