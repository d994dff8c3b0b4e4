import { describe, expect, it, vi } from 'vitest';
import { UsageError } from '../../../src/cli/args.js';
import { parseImageAliases, run } from '../../../src/cli/commands/serve.js';

describe('rollout serve --image-alias / --polar-image', () => {
  it('reads FROM=TO pairs, trimmed, the catch-all * included, a later FROM winning', () => {
    expect(parseImageAliases(['python:3.11=py-test', ' ghcr.io/a/b:1 = swe-1 ', '*=py-test', 'python:3.11=py-2'])).toEqual({ 'python:3.11': 'py-2', 'ghcr.io/a/b:1': 'swe-1', '*': 'py-test' });
  });

  it.each(['python:3.11', '=py-test', 'python:3.11=', ' = '])('refuses %j naming the flag and the form', (flag) => {
    expect(() => parseImageAliases([flag])).toThrow(UsageError);
    expect(() => parseImageAliases([flag])).toThrow(/--image-alias must be FROM=TO/);
  });

  it('exits 2 before starting anything on a bad --polar-image or --image-alias', async () => {
    const err = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    try {
      expect(await run(['--port', '0', '--polar-image', 'lenient'])).toBe(2);
      expect(await run(['--port', '0', '--image-alias', 'python'])).toBe(2);
      const said = err.mock.calls.map((c) => String(c[0])).join('');
      expect(said).toContain("--polar-image must be one of strict, ignore; got 'lenient'");
      expect(said).toContain("--image-alias must be FROM=TO (a Docker reference, or *, and an image-store name), got 'python'");
    } finally {
      err.mockRestore();
    }
  });
});
