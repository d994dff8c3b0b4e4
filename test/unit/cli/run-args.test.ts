import { describe, expect, it } from 'vitest';
import { parseRunArgs } from '../../../src/cli/commands/run.js';

describe('parseRunArgs', () => {
  it('reads repeated backends and numeric options', () => {
    const o = parseRunArgs(['t.jsonl', '--backend', 'http://a:1', '--backend', 'vllm+http://b:2', '--n', '4', '--concurrency', '8', '--max-iterations', '10', '--sandbox', 'none']);
    expect(o).toMatchObject({ tasksPath: 't.jsonl', backends: ['http://a:1', 'vllm+http://b:2'], n: 4, concurrency: 8, maxIterations: 10, sandbox: 'none' });
  });
  it('defaults the output to a timestamped directory under rollouts-out', () => {
    expect(parseRunArgs(['t.jsonl'])?.outDir).toMatch(/rollouts-out\/\d{4}-\d\d-\d\dT\d\d-\d\d-\d\dZ$/);
  });
  it('returns null for --help', () => {
    expect(parseRunArgs(['--help'])).toBeNull();
  });
  it('refuses a missing task file argument', () => {
    expect(() => parseRunArgs(['--n', '2'])).toThrow(/missing the task file/);
  });
  it('refuses a non-integer --n naming the option', () => {
    expect(() => parseRunArgs(['t.jsonl', '--n', 'two'])).toThrow(/--n must be a positive integer, got 'two'/);
  });
  it('refuses an unknown sandbox driver', () => {
    expect(() => parseRunArgs(['t.jsonl', '--sandbox', 'docker'])).toThrow(/--sandbox must be/);
  });
  it('refuses oracle mixed with a real backend in one clear line naming both', () => {
    expect(() => parseRunArgs(['t.jsonl', '--backend', 'oracle', '--backend', 'vllm+http://127.0.0.1:8000'])).toThrow(
      "--backend oracle replays each instance's oracle turns and cannot be mixed with a real backend (vllm+http://127.0.0.1:8000): give one or the other",
    );
  });
  it('refuses an unknown option', () => {
    expect(() => parseRunArgs(['t.jsonl', '--bogus'])).toThrow(/bogus/);
  });
});
