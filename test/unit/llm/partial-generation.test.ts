import { describe, expect, it } from 'vitest';
import type { GenerateResult } from '../../../src/llm/llm-client.js';
import { joinPartial, segmented } from '../../../src/llm/partial-generation.js';

const gen = (ids: number[], version: string | number | null, finishReason: GenerateResult['finishReason'] = 'stop', extra: Partial<GenerateResult> = {}): GenerateResult => ({
  outputIds: ids,
  logprobs: ids.map((i) => -i / 10),
  backendId: `b${String(version)}`,
  weightVersion: version,
  finishReason,
  ...extra,
});

describe('joinPartial', () => {
  it('is the prefix + the continuation, logprobs aligned, each token keeping its version', () => {
    const j = joinPartial(segmented(gen([1, 2, 3], 1, 'abort')), gen([4, 5], 2));
    expect(j.outputIds).toEqual([1, 2, 3, 4, 5]);
    expect(j.logprobs).toEqual([-0.1, -0.2, -0.3, -0.4, -0.5]);
    expect(j.weightVersions).toEqual([{ version: 1, tokens: 3 }, { version: 2, tokens: 2 }]);
    expect(j).toMatchObject({ finishReason: 'stop', weightVersion: 2, backendId: 'b2' });
  });

  it.each([
    ['merges a continuation at the same version', [1], 1, [{ version: 1, tokens: 3 }]],
    ['adds nothing for an empty continuation', [], 2, [{ version: 1, tokens: 2 }]],
  ] as const)('%s', (_n, cont, v, runs) => {
    expect(joinPartial(segmented(gen([1, 2], 1, 'abort')), gen([...cont], v)).weightVersions).toEqual(runs);
  });

  it('starts from an empty prefix (aborted before any token) and chains resumes', () => {
    const a = joinPartial(segmented(gen([], 1, 'abort')), gen([7], 2, 'abort'));
    const b = joinPartial(a, gen([8, 9], 3));
    expect(b.outputIds).toEqual([7, 8, 9]);
    expect(b.weightVersions).toEqual([{ version: 2, tokens: 1 }, { version: 3, tokens: 2 }]);
  });

  it('marks the whole retokenized when either part was', () => {
    expect(joinPartial(segmented(gen([1], 1, 'abort', { tokenSource: 'retokenized' })), gen([2], 1)).tokenSource).toBe('retokenized');
  });
});
