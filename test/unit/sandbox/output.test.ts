import { describe, expect, it } from 'vitest';
import { cleanTerminalOutput, truncateMiddle } from '../../../src/sandbox/output.js';

describe('cleanTerminalOutput', () => {
  it('strips colour and cursor sequences and OSC titles', () => {
    expect(cleanTerminalOutput('\x1b[31mred\x1b[0m \x1b[2K\x1b]0;title\x07done')).toBe('red done');
  });

  it('turns CRLF into LF and keeps only the last rewrite of a carriage-returned line', () => {
    expect(cleanTerminalOutput('a\r\n10%\r50%\r100%\nb')).toBe('a\n100%\nb');
  });
});

describe('truncateMiddle', () => {
  it('returns short text unchanged', () => {
    expect(truncateMiddle('abc', 10)).toEqual({ text: 'abc', truncated: false });
  });

  it('keeps the head, a slice around 80% of the way and the tail, with notes', () => {
    const text = Array.from({ length: 10_000 }, (_, i) => String(i).padStart(5, '0')).join('\n');
    const { text: out, truncated } = truncateMiddle(text, 1000);
    expect(truncated).toBe(true);
    expect(out.startsWith('00000\n')).toBe(true);
    expect(out).toContain('09999');
    // the middle slice comes from around line 8,000
    expect(out).toMatch(/0799\d|0800\d/);
    expect(out).toMatch(/characters truncated/);
    expect(out).toMatch(/Output truncated: 59999 characters/);
  });
});
