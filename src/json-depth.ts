/**
 * Maximum bracket nesting of a JSON text, skipping strings. One linear pass, no recursion: a
 * body of a million `[` must not reach a recursive parser or validator.
 */
export function jsonDepth(text: string): number {
  let depth = 0;
  let max = 0;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 34 /* " */) {
      // Jump to the closing quote (bodies are mostly string content): a quote is escaped when an
      // odd run of backslashes, inside this string, stands right before it.
      const open = i;
      for (;;) {
        i = text.indexOf('"', i + 1);
        if (i < 0) return max;
        let k = i - 1;
        while (k > open && text.charCodeAt(k) === 92 /* \ */) k--;
        if ((i - 1 - k) % 2 === 0) break;
      }
    } else if (c === 91 /* [ */ || c === 123 /* { */) {
      if (++depth > max) max = depth;
    } else if (c === 93 /* ] */ || c === 125 /* } */) depth--;
  }
  return max;
}
