import { jsonValueDepth } from './json-value-depth.js';

/** Where the history array of a parsed body lies in its bytes. */
interface Located {
  /** Offset of the array's `[`. */
  open: number;
  /** Offset just after each item. */
  ends: number[];
  /** Offset of the array's `]`. */
  close: number;
  /**
   * The keys of the top-level members after the array, in order (the history key not among
   * them); null when one is `__proto__`, which an assignment cannot copy as `JSON.parse` makes it.
   */
  restKeys: string[] | null;
}

/** The previous body, its history array's layout and items as parsed. */
interface Previous extends Located {
  buf: Buffer;
  json: Record<string, unknown>;
  items: unknown[];
}

/** A body nested deeper than the limit (its parse succeeded). */
export class BodyNestingError extends Error {
  override readonly name = 'BodyNestingError';
}

/**
 * `JSON.parse` of an agent's request body that skips the history it re-sent unchanged. An agent
 * sends its whole conversation with every call (`messages`, `input`, `contents`: the `key`
 * here), so parsing the body is O(history) per call — the largest single cost of reading a
 * request (~0.2–0.8 ms at 200–600 turns, bench/proxy-profile.ts), before the readers even look
 * at it. When the new body's bytes start with the previous body's up to the end of its k-th
 * history item (found by a binary search over item ends with `Buffer.compare`, i.e. memcmp),
 * those k items are the previous body's items: only the rest of the body — the array's new
 * items and whatever surrounds the array — is parsed, and the k items already parsed are put
 * back in front of the new ones. When the members after the array (the CLIs' tools, tens of KB)
 * are the previous body's byte for byte too, they are not parsed either: the previous values are
 * put back, in the places `JSON.parse` gives them. The reused values are the previous call's
 * objects, so the readers' own reuse (chat-request-reader.ts `jsonEqual`, `reusedPrefix`) finds
 * them equal by identity at once.
 *
 * The result equals `JSON.parse` of the whole body for every body it accepts, and a body it
 * rejects (malformed, or nested deeper than `maxDepth`) is rejected with `JSON.parse`'s own
 * error, from a parse of the whole text: byte-identical bytes up to a value's end leave a JSON
 * parser in the same state, so the prefix parses to the same items; the bytes after it are
 * parsed for real; a second history key later in the body (`JSON.parse` keeps the last) makes it
 * fall back to a whole parse. The nesting limit is checked on what was parsed: the reused items
 * passed it in the same place of an earlier body. Locating the array in a body that reused
 * nothing costs a scan of it (about a fifth of its parse); after {@link MAX_MISSES} such bodies in
 * a row (a client whose bytes never repeat) the scan is skipped until a body repeats one.
 */
export class ResentBody {
  private prev: Previous | null = null;
  /** Bodies in a row that reused nothing of a located previous one, and bodies not located since. */
  private misses = 0;
  private skips = 0;

  constructor(
    /** The body's top-level key holding the re-sent history. */
    private readonly key: string,
    private readonly maxDepth: number,
  ) {}

  /**
   * The body parsed. Throws `JSON.parse`'s SyntaxError on a malformed body, {@link BodyNestingError}
   * on one nested deeper than `maxDepth`.
   */
  parse(buf: Buffer): unknown {
    if (this.prev) {
      const reused = this.reuse(buf, this.prev);
      if (reused !== null) {
        this.misses = 0;
        return reused;
      }
      this.misses++;
    }
    const json = JSON.parse(buf.toString('utf8')) as unknown;
    this.prev = null;
    if (jsonValueDepth(json, this.maxDepth) > this.maxDepth) throw new BodyNestingError(`JSON nested deeper than ${this.maxDepth}`);
    // A client whose bodies never repeat the last one's bytes: locate only one body in MAX_MISSES.
    if (this.misses >= MAX_MISSES && ++this.skips < MAX_MISSES) return json;
    this.skips = 0;
    const items = isObject(json) ? json[this.key] : undefined;
    const at = Array.isArray(items) ? locate(buf, this.key) : null;
    this.prev = at && at.ends.length === (items as unknown[]).length ? { ...at, buf, json: json as Record<string, unknown>, items: items as unknown[] } : null;
    return json;
  }

  /** The body with the items shared with `prev` reused, or null when none can be (the caller parses it whole). */
  private reuse(buf: Buffer, prev: Previous): Record<string, unknown> | null {
    // The most items whose bytes, and everything before them, are the previous body's: all of
    // them when the agent only appended (one memcmp), else a binary search over the item ends.
    const n = prev.ends.length;
    const same = (k: number): boolean => {
      const end = prev.ends[k - 1]!;
      return end <= buf.length && buf.compare(prev.buf, 0, end, 0, end) === 0;
    };
    let lo = 0;
    if (same(n)) lo = n;
    else {
      let hi = n - 1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (same(mid)) lo = mid;
        else hi = mid - 1;
      }
    }
    let k = lo;
    if (k === 0) return null;
    // After item k: a comma and new items, or the array's end (then item k is parsed again: the
    // part parsed must hold at least one item, or it would be a valid array where the whole
    // body has a trailing comma).
    let i = skipWs(buf, prev.ends[k - 1]!);
    if (buf[i] === RBRACK) {
      k--;
      if (k === 0) return null;
      i = skipWs(buf, prev.ends[k - 1]!);
    }
    if (buf[i] !== COMMA) return null;
    const start = skipWs(buf, i + 1);
    if (buf[start] === RBRACK) return null;
    const ends = prev.ends.slice(0, k);
    const close = scanItems(buf, start, ends);
    if (close < 0) return null;
    // The members after the array: the previous body's byte for byte (then they are its values,
    // not parsed again: the CLIs' tools are tens of KB), or read here — and a second history key
    // among them would be the one `JSON.parse` keeps, so none may be.
    const sameRest = buf.length - close === prev.buf.length - prev.close && buf.compare(prev.buf, prev.close, prev.buf.length, close, buf.length) === 0;
    let restKeys = prev.restKeys;
    if (!sameRest) {
      const keys = restKeysOf(buf, close + 1);
      if (!keys || keys.includes(this.key)) return null;
      restKeys = keys.includes('__proto__') ? null : keys;
    }
    const copyRest = sameRest && restKeys !== null;
    let json: unknown;
    try {
      json = JSON.parse(buf.toString('utf8', 0, prev.open + 1) + (copyRest ? buf.toString('utf8', start, close + 1) + '}' : buf.toString('utf8', start)));
    } catch {
      return null;
    }
    if (!isObject(json)) return null;
    const tail = json[this.key];
    if (!Array.isArray(tail) || tail.length !== ends.length - k) return null;
    if (jsonValueDepth(json, this.maxDepth) > this.maxDepth) return null;
    const items = prev.items.slice(0, k);
    for (let j = 0; j < tail.length; j++) items.push(tail[j]);
    json[this.key] = items;
    // In their order after the history key (in place, for a key also before it), each with its
    // last value: where `JSON.parse` of the whole body puts them.
    if (copyRest) for (const key of restKeys!) json[key] = prev.json[key];
    this.prev = { buf, open: prev.open, ends, close, restKeys, json, items };
    return json;
  }
}

/** Bodies in a row that reused nothing before the array is no longer located in every one. */
const MAX_MISSES = 4;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const COLON = 0x3a;
const LBRACE = 0x7b;
const RBRACE = 0x7d;
const LBRACK = 0x5b;
const RBRACK = 0x5d;

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function skipWs(b: Buffer, i: number): number {
  while (i < b.length) {
    const c = b[i]!;
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
    i++;
  }
  return i;
}

/** The offset after the string starting at `i` (its opening quote), or -1. UTF-8 never has a quote or backslash byte inside a multi-byte character. */
function stringEnd(b: Buffer, i: number): number {
  let from = i + 1;
  for (;;) {
    const q = b.indexOf(QUOTE, from);
    if (q < 0) return -1;
    let slashes = 0;
    for (let j = q - 1; j > i && b[j] === BACKSLASH; j--) slashes++;
    if (slashes % 2 === 0) return q + 1;
    from = q + 1;
  }
}

/** The offset after the JSON value starting at `i`, or -1. Exact on valid JSON; what it makes of invalid JSON is checked by the parse that follows. */
function valueEnd(b: Buffer, i: number): number {
  const c = b[i];
  if (c === QUOTE) return stringEnd(b, i);
  if (c === LBRACE || c === LBRACK) {
    let depth = 0;
    for (let j = i; j < b.length; j++) {
      const x = b[j]!;
      if (x === QUOTE) {
        const e = stringEnd(b, j);
        if (e < 0) return -1;
        j = e - 1;
      } else if (x === LBRACE || x === LBRACK) depth++;
      else if (x === RBRACE || x === RBRACK) {
        if (--depth === 0) return j + 1;
      }
    }
    return -1;
  }
  let j = i;
  while (j < b.length) {
    const x = b[j]!;
    if (x === COMMA || x === RBRACK || x === RBRACE || x === 0x20 || x === 0x0a || x === 0x0d || x === 0x09) break;
    j++;
  }
  return j > i ? j : -1;
}

/** Scans array items from `i` (the first item's first byte, or the `]`), pushing each one's end; the offset of the `]`, or -1. */
function scanItems(b: Buffer, i: number, ends: number[]): number {
  if (b[i] === RBRACK) return i;
  for (;;) {
    const e = valueEnd(b, i);
    if (e < 0) return -1;
    ends.push(e);
    i = skipWs(b, e);
    if (b[i] === RBRACK) return i;
    if (b[i] !== COMMA) return -1;
    i = skipWs(b, i + 1);
  }
}

/** The key of the string at `[i, end)`, escapes decoded as `JSON.parse` would; null when they are not valid. */
function keyAt(b: Buffer, i: number, end: number): string | null {
  const raw = b.toString('utf8', i, end);
  if (!raw.includes('\\')) return raw.slice(1, -1);
  try {
    return JSON.parse(raw) as string;
  } catch {
    return null;
  }
}

/**
 * The history array of a body `JSON.parse` accepted: the value of the top-level `key`, when it
 * is an array and the key occurs once. Null otherwise.
 */
function locate(b: Buffer, key: string): Located | null {
  let i = skipWs(b, 0);
  if (b[i] !== LBRACE) return null;
  i = skipWs(b, i + 1);
  let found: Omit<Located, 'restKeys'> | null = null;
  const restKeys: string[] = [];
  while (b[i] === QUOTE) {
    const ke = stringEnd(b, i);
    if (ke < 0) return null;
    const k = keyAt(b, i, ke);
    i = skipWs(b, ke);
    if (b[i] !== COLON) return null;
    i = skipWs(b, i + 1);
    if (found && k !== null) restKeys.push(k);
    if (k === key) {
      if (found || b[i] !== LBRACK) return null;
      const ends: number[] = [];
      const close = scanItems(b, skipWs(b, i + 1), ends);
      if (close < 0) return null;
      found = { open: i, ends, close };
      i = close + 1;
    } else {
      i = valueEnd(b, i);
      if (i < 0) return null;
    }
    i = skipWs(b, i);
    if (b[i] !== COMMA) break;
    i = skipWs(b, i + 1);
  }
  return found && { ...found, restKeys: restKeys.includes('__proto__') ? null : restKeys };
}

/** The keys of the top-level object's members after offset `i` (just after the history array), in order; null when they cannot be read. */
function restKeysOf(b: Buffer, i: number): string[] | null {
  const keys: string[] = [];
  i = skipWs(b, i);
  while (b[i] === COMMA) {
    i = skipWs(b, i + 1);
    if (b[i] !== QUOTE) return null;
    const ke = stringEnd(b, i);
    if (ke < 0) return null;
    const k = keyAt(b, i, ke);
    if (k === null) return null;
    keys.push(k);
    i = skipWs(b, ke);
    if (b[i] !== COLON) return null;
    i = valueEnd(b, skipWs(b, i + 1));
    if (i < 0) return null;
    i = skipWs(b, i);
  }
  return keys;
}
