import { describe, expect, it } from 'vitest';
import { materializeTrajectory, PrefixStore, stripPrefix } from '../../../src/runtime/trajectory-prefix.js';
import { ValidationError } from '../../../src/errors.js';
import type { Trajectory } from '../../../src/protocol/trajectory.js';

/** A hand-made record: prompt [1,2], turn 0 samples [3,4], observation [5], turn 1 samples [6] (version 'v2'). */
function full(): Trajectory {
  const turn = (promptIds: number[], outputIds: number[], weightVersion: string) => ({ promptIds, outputIds, logprobs: outputIds.map((i) => -i / 10), backendId: 'b', weightVersion, finishReason: 'stop' as const, latencyMs: 1 });
  return {
    turns: [turn([1, 2], [3, 4], 'v1'), turn([1, 2, 3, 4, 5], [6], 'v2')],
    tokens: [1, 2, 3, 4, 5, 6],
    lossMask: [0, 0, 1, 1, 0, 1],
    logprobs: [0, 0, -0.3, -0.4, 0, -0.6],
    messages: [
      { role: 'user', content: 'q' },
      { role: 'assistant', content: 'a' },
      { role: 'tool', content: 'o', tool_call_id: 'c' },
      { role: 'assistant', content: 'b' },
    ],
    tools: [],
    diagnostics: { drift: [] },
    weightVersions: [
      { version: 'v1', tokens: 2 },
      { version: 'v2', tokens: 1 },
    ],
    minWeightVersion: 'v1',
    maxWeightVersion: 'v2',
  };
}
const ref = { id: 'p', tokens: 5, turns: 1, messages: 3 };

describe('shared prefixes (#26)', () => {
  it('strips a prefix to the part after it, recounting the weight versions', () => {
    const s = stripPrefix(full(), ref);
    expect([s.tokens, s.lossMask, s.turns.length, s.messages.length, s.prefix]).toEqual([[6], [1], 1, 1, ref]);
    expect([s.weightVersions, s.minWeightVersion, s.maxWeightVersion]).toEqual([[{ version: 'v2', tokens: 1 }], 'v2', 'v2']);
  });

  it('materializes prefix + part back into the unforked record, and masks the prefix on request', () => {
    const f = full();
    const prefix = { ...f, turns: f.turns.slice(0, 1), tokens: f.tokens.slice(0, 5), lossMask: f.lossMask.slice(0, 5), logprobs: f.logprobs.slice(0, 5), messages: f.messages.slice(0, 3), weightVersions: [{ version: 'v1', tokens: 2 }] };
    const m = materializeTrajectory(stripPrefix(f, ref), (id) => (id === 'p' ? prefix : undefined));
    expect([m.tokens, m.lossMask, m.logprobs, m.turns, m.messages, m.weightVersions, m.prefix]).toEqual([f.tokens, f.lossMask, f.logprobs, f.turns, f.messages, f.weightVersions, undefined]);
    const masked = materializeTrajectory(stripPrefix(f, ref), () => prefix, { maskPrefix: true });
    expect([masked.lossMask, masked.logprobs, masked.weightVersions]).toEqual([[0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, -0.6], [{ version: 'v2', tokens: 1 }]]);
  });

  it('names the prefix when it is unknown or of another length', () => {
    const part = stripPrefix(full(), ref);
    const e = (() => {
      try {
        materializeTrajectory(part, () => undefined);
      } catch (x) {
        return x as ValidationError;
      }
    })();
    expect(e).toBeInstanceOf(ValidationError);
    expect(e!.issues[0]!.path).toBe('prefix.id');
    expect(() => materializeTrajectory(part, () => ({ ...full(), tokens: [1] }))).toThrow(/has 1 tokens and 2 turns, the reference says 5 and 1/);
  });

  it('stores a nested prefix as its own part and drops each with its last reference', () => {
    const store = new PrefixStore();
    const f = full();
    const base = store.put({ ...f, turns: f.turns.slice(0, 1), tokens: f.tokens.slice(0, 5), lossMask: f.lossMask.slice(0, 5), logprobs: f.logprobs.slice(0, 5), messages: f.messages.slice(0, 3) }, null);
    store.retain(base.id);
    const nested = store.put(f, base);
    store.retain(nested.id);
    expect(store.get(nested.id)!.tokens).toEqual([6]);
    expect(store.get(nested.id)!.prefix).toEqual(base);
    expect(Object.keys(store.chain({ ...f, prefix: nested }))).toEqual([nested.id, base.id]);
    store.release(base.id);
    // Still held through the nested prefix.
    expect(store.size).toBe(2);
    store.release(nested.id);
    expect(store.size).toBe(0);
  });
});
