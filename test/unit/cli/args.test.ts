import { afterEach, describe, expect, it, vi } from 'vitest';
import { numberFlag, parseFlags, UsageError } from '../../../src/cli/args.js';

afterEach(() => vi.restoreAllMocks());

describe('parseFlags', () => {
  it('returns the parsed flags', () => {
    const r = parseFlags('x', ['--port', '8', '--b', 'one', '--b', 'two'], { port: { type: 'string' }, b: { type: 'string', multiple: true } }, 'usage');
    expect(typeof r === 'number' ? r : r.values).toEqual({ port: '8', b: ['one', 'two'] });
  });

  it('prints the usage and returns 0 for --help', () => {
    const out = vi.spyOn(process.stdout, 'write').mockReturnValue(true);
    expect(parseFlags('x', ['-h'], { port: { type: 'string' } }, 'the usage\n')).toBe(0);
    expect(out).toHaveBeenCalledWith('the usage\n');
  });

  it('prints the problem and the usage and returns 2 for an unknown flag or a stray argument', () => {
    const err = vi.spyOn(process.stderr, 'write').mockReturnValue(true);
    expect(parseFlags('x', ['--nope'], { port: { type: 'string' } }, 'the usage\n')).toBe(2);
    expect(String(err.mock.calls[0]?.[0])).toMatch(/^rollout x: .*--nope[\s\S]*the usage\n$/);
    expect(parseFlags('x', ['stray'], { port: { type: 'string' } }, 'u')).toBe(2);
  });
});

describe('numberFlag', () => {
  it('reads numbers and leaves an absent flag undefined', () => {
    expect([numberFlag('rate', '0.25'), numberFlag('port', '8006', { integer: true }), numberFlag('port', undefined)]).toEqual([0.25, 8006, undefined]);
  });

  it('refuses a value that is not a number, naming the flag', () => {
    expect(() => numberFlag('rate', 'abc')).toThrow(new UsageError("--rate must be a number, got 'abc'"));
    expect(() => numberFlag('rate', '')).toThrow(UsageError);
  });

  it('refuses a fraction or a negative number where an integer is needed', () => {
    expect(() => numberFlag('port', '1.5', { integer: true })).toThrow(/--port must be a non-negative integer, got '1.5'/);
    expect(() => numberFlag('port', '-1', { integer: true })).toThrow(UsageError);
  });
});
