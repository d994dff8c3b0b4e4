import { describe, expect, it } from 'vitest';
import { jsonDepth } from '../../src/json-depth.js';

/** The reference: one character at a time (the scan jsonDepth replaced; strings skipped). */
function slowDepth(text: string): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === '[' || c === '{') max = Math.max(max, ++depth);
    else if (c === ']' || c === '}') depth--;
  }
  return max;
}

describe('jsonDepth (the proxy and the service refuse deep JSON before parsing it)', () => {
  it('skips brackets inside strings, escaped quotes and runs of backslashes included', () => {
    expect(jsonDepth('{"a":"[[[[{{{{","b":[[1]]}')).toBe(3);
    expect(jsonDepth('{"a":"x\\"[[[[","b":1}')).toBe(1);
    expect(jsonDepth('{"a":"x\\\\","b":[[[1]]]}')).toBe(4);
    expect(jsonDepth('{"a":"x\\\\\\"[[","b":[1]}')).toBe(2);
    expect(jsonDepth('["\\\\\\\\"]')).toBe(1);
  });

  it('stops at an unterminated string with the depth seen before it', () => {
    expect(jsonDepth('[[["abc')).toBe(3);
    expect(jsonDepth('[[["abc\\"')).toBe(3);
  });

  it('agrees with the one-character scan on random bracket, quote and backslash soup', () => {
    const alphabet = ['[', ']', '{', '}', '"', '\\', 'a', ',', ':'];
    let seed = 7;
    const rand = (n: number): number => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed % n;
    };
    for (let t = 0; t < 20_000; t++) {
      let s = '';
      const len = rand(40);
      for (let i = 0; i < len; i++) s += alphabet[rand(alphabet.length)];
      expect(jsonDepth(s), JSON.stringify(s)).toBe(slowDepth(s));
    }
  });
});
