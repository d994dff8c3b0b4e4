import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { jsonDepth } from '../../../src/json-depth.js';
import { jsonValueDepth } from '../../../src/proxy/json-value-depth.js';

describe('jsonValueDepth', () => {
  it('finds the depth jsonDepth finds in the text, for any JSON value', () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 12 }), (v) => {
        expect(jsonValueDepth(v)).toBe(jsonDepth(JSON.stringify(v)));
      }),
      { numRuns: 500 },
    );
  });

  it('walks a value nested a million deep without recursion, and stops past the limit', () => {
    const deep = JSON.parse('['.repeat(1_000_000) + ']'.repeat(1_000_000)) as unknown;
    expect(jsonValueDepth(deep)).toBe(1_000_000);
    expect(jsonValueDepth(deep, 64)).toBe(65);
    expect(jsonValueDepth({ a: [{ b: 1 }], c: 'x' }, 64)).toBe(3);
  });
});
