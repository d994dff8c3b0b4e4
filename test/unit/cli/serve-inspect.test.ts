import { describe, expect, it } from 'vitest';
import { UsageError } from '../../../src/cli/args.js';
import { inspectSelection } from '../../../src/cli/commands/serve.js';

describe('rollout serve --inspect-rollouts / --inspect-groups / --inspect-sample', () => {
  it('watches every rollout when no narrowing flag is given', () => {
    expect(inspectSelection({ inspect: 'ws://127.0.0.1:1' })).toBeUndefined();
  });

  it('reads comma-separated ids and groups and a rate', () => {
    expect(inspectSelection({ inspect: 'ws://x', 'inspect-rollouts': 'a, b,', 'inspect-groups': 'g1', 'inspect-sample': '0.1' })).toEqual({
      rollouts: ['a', 'b'],
      groups: ['g1'],
      sampleRate: 0.1,
    });
  });

  it('refuses a rate outside 0..1, naming the flag and the range', () => {
    expect(() => inspectSelection({ inspect: 'ws://x', 'inspect-sample': '1.5' })).toThrow(UsageError);
    expect(() => inspectSelection({ inspect: 'ws://x', 'inspect-sample': 'half' })).toThrow(/--inspect-sample/);
    expect(() => inspectSelection({ inspect: 'ws://x', 'inspect-sample': '1.5' })).toThrow(/--inspect-sample must be a number in \[0, 1\], got '1.5'/);
  });

  it('refuses a narrowing flag without --inspect', () => {
    expect(() => inspectSelection({ 'inspect-groups': 'g1' })).toThrow(/give --inspect too/);
  });
});
