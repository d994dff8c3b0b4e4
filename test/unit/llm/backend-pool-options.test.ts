import { describe, expect, it } from 'vitest';
import { ValidationError } from '../../../src/errors.js';
import { parseBackendPoolOptions } from '../../../src/llm/backend-pool-options.js';

describe('parseBackendPoolOptions', () => {
  it('fills every default and freezes the result', () => {
    const o = parseBackendPoolOptions({});
    expect(o).toMatchObject({ policy: 'least-loaded', stickySlack: 2, retries: 2, probeIntervalMs: 5000, failureThreshold: 2 });
    expect(Object.isFrozen(o)).toBe(true);
  });

  it('names the bad field in the ValidationError', () => {
    try {
      parseBackendPoolOptions({ retries: -1 });
      expect.unreachable();
    } catch (e) {
      expect(e).toBeInstanceOf(ValidationError);
      expect((e as ValidationError).issues[0]!.path).toBe('retries');
    }
  });

  it('refuses unknown fields', () => {
    expect(() => parseBackendPoolOptions({ retry: 3 })).toThrow(ValidationError);
  });
});
