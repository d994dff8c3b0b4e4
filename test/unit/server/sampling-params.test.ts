import { describe, expect, it } from 'vitest';
import { SamplingParamsSchema } from '../../../src/protocol/instance.js';

const issues = (v: unknown): string[] => {
  const r = SamplingParamsSchema.safeParse(v);
  return r.success ? [] : r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
};

describe('sampling params as engines accept them (#10.7)', () => {
  it('accepts the values vLLM and SGLang accept', () => {
    expect(issues({ temperature: 0, top_p: 1, top_k: -1, max_tokens: 1, min_p: 0, seed: 7 })).toEqual([]);
    expect(issues({ temperature: 2, top_p: 0.01, top_k: 1, presence_penalty: -2, frequency_penalty: 2, repetition_penalty: 1.1 })).toEqual([]);
  });

  it('refuses out-of-range values naming the field and the range', () => {
    expect(issues({ temperature: 2.5 })).toEqual(['temperature: must be in [0, 2]']);
    expect(issues({ top_p: 0 })).toEqual(['top_p: must be in (0, 1]']);
    expect(issues({ top_k: 0 })).toEqual(['top_k: must be -1 (off) or at least 1']);
    expect(issues({ max_tokens: 0 })).toEqual(['max_tokens: must be at least 1']);
    expect(issues({ min_p: 1.5 })[0]).toMatch(/^min_p/);
  });

  it('takes max_tokens as the per-turn cap unless max_output_tokens is given', () => {
    expect(SamplingParamsSchema.parse({ max_tokens: 64 }).max_output_tokens).toBe(64);
    expect(SamplingParamsSchema.parse({ max_tokens: 64, max_output_tokens: 32 }).max_output_tokens).toBe(32);
  });
});
