import { describe, expect, it } from 'vitest';
import { chooseConcurrency, DEFAULT_CONCURRENCY } from '../../../src/cli/commands/run-concurrency.js';

describe('chooseConcurrency', () => {
  it('uses --concurrency when given, whatever the engines say', () => {
    expect(chooseConcurrency(8, [4])).toEqual({ concurrency: 8, reason: '--concurrency' });
  });
  it("sums the engines' slots when every backend reports them", () => {
    expect(chooseConcurrency(undefined, [4, 2])).toMatchObject({ concurrency: 6, reason: expect.stringContaining("the engines' slots (4 + 2)") });
  });
  it('falls back to the stated default when a backend does not report its slots, saying so', () => {
    expect(chooseConcurrency(undefined, [4, null])).toMatchObject({ concurrency: DEFAULT_CONCURRENCY, reason: expect.stringContaining('1 of 2 backends do not report') });
  });
  it('uses the default with no real backend (the oracle)', () => {
    expect(chooseConcurrency(undefined, [])).toMatchObject({ concurrency: DEFAULT_CONCURRENCY, reason: expect.stringMatching(/^default/) });
  });
});
