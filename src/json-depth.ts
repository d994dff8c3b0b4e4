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
      i = stringEnd(text, i);
      if (i < 0) return max;
    } else if (c === 91 /* [ */ || c === 123 /* { */) {
      if (++depth > max) max = depth;
    } else if (c === 93 /* ] */ || c === 125 /* } */) depth--;
  }
  return max;
}

/**
 * The index of the quote closing the JSON string opened at `open`, or -1 when it never closes.
 * Jumps from quote to quote (bodies are mostly string content): a quote is escaped when an odd
 * run of backslashes, inside this string, stands right before it.
 */
export function stringEnd(text: string, open: number): number {
  let i = open;
  for (;;) {
    i = text.indexOf('"', i + 1);
    if (i < 0) return -1;
    let k = i - 1;
    while (k > open && text.charCodeAt(k) === 92 /* \ */) k--;
    if ((i - 1 - k) % 2 === 0) return i;
  }
}
