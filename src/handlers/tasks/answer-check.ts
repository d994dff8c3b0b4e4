/**
 * Answer extraction and comparison shared by the math and STEM handlers. Pure functions, no I/O.
 *
 * The checks are deliberately tolerant of notation (`\frac{1}{2}`, `1/2`, `0.5`, `50\%` against
 * `0.5` is NOT equal — percent keeps its number) and strict about value: a wrong number never
 * passes. Rules and their reasons are in docs/tasks.md.
 */

/**
 * The content of the last `\boxed{...}` (or `\fbox{...}`) in `text`, braces balanced, or null
 * when there is none. `\boxed 5` (no braces) is read up to the next space or `$`.
 */
export function extractBoxed(text: string): string | null {
  let found: string | null = null;
  const re = /\\(?:boxed|fbox)\s*/g;
  let m: RegExpExecArray | null;
  while ((m = re.exec(text)) !== null) {
    const start = m.index + m[0].length;
    if (text[start] === '{') {
      let depth = 0;
      for (let i = start; i < text.length; i++) {
        const ch = text[i];
        if (ch === '{') depth++;
        else if (ch === '}') {
          depth--;
          if (depth === 0) {
            found = text.slice(start + 1, i);
            break;
          }
        }
      }
    } else {
      const rest = /^[^\s$]+/.exec(text.slice(start));
      if (rest) found = rest[0];
    }
  }
  return found;
}

/**
 * The final answer of a math response: the last `\boxed{}` if any, else the text after the last
 * "answer is" / "Answer:", else the whole text when it is short (a bare `42` in the finish
 * message). Null when nothing looks like an answer.
 */
export function extractMathAnswer(text: string): string | null {
  const boxed = extractBoxed(text);
  if (boxed !== null) return boxed.trim();
  const said = [...text.matchAll(/answer\s*(?:is|:|=)\s*:?\s*([^\n]+)/gi)].pop();
  if (said?.[1]) return said[1].trim().replace(/[.。]\s*$/, '');
  const t = text.trim();
  if (t.length > 0 && t.length <= 40 && !t.includes('\n')) return t;
  return null;
}

/**
 * Normalizes a math answer string for comparison: strips `$`, `\left`/`\right`, `\text{}`
 * wrappers, spacing macros, a trailing period, degree marks, and surrounding whitespace.
 */
export function normalizeMathAnswer(s: string): string {
  let t = s.trim();
  t = t.replace(/^\$+|\$+$/g, '');
  t = t.replace(/\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}/g, '$1');
  t = t.replace(/\\left|\\right/g, '');
  t = t.replace(/\\[,;:! ]/g, '');
  t = t.replace(/\\displaystyle/g, '');
  t = t.replace(/\^\s*\{?\\circ\}?/g, '');
  t = t.replace(/°/g, '');
  t = t.replace(/\\dfrac|\\tfrac/g, '\\frac');
  t = t.replace(/\s+/g, '');
  t = t.replace(/[.。]+$/, '');
  // "x = 5" and "a=5" answer with the value.
  const eq = /^[a-zA-Z]\w*=(.+)$/.exec(t);
  if (eq?.[1] && !eq[1].includes('=')) t = eq[1];
  return t;
}

/**
 * Parses a number in the notations answers come in: integers (with thousands commas), decimals,
 * scientific, `a/b`, `\frac{a}{b}`, `\frac ab`, a leading sign, `\sqrt{n}`, `k\sqrt{n}`, `k\pi`,
 * and `n\%` (as n). Returns null for anything else (expressions, intervals, text).
 */
export function parseNumber(raw: string): number | null {
  let t = normalizeMathAnswer(raw);
  t = t.replace(/\\%|%$/g, '');
  if (t === '') return null;
  let sign = 1;
  while (t.startsWith('-') || t.startsWith('+')) {
    if (t[0] === '-') sign = -sign;
    t = t.slice(1);
  }
  if (t.startsWith('(') && t.endsWith(')') && !t.slice(1, -1).includes(',')) {
    const inner = parseNumber(t.slice(1, -1));
    return inner === null ? null : sign * inner;
  }
  if (/^\d{1,3}(,\d{3})+(\.\d+)?$/.test(t)) t = t.replace(/,/g, '');
  if (/^(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i.test(t)) return sign * Number(t);
  let m = /^\\frac\{([^{}]+)\}\{([^{}]+)\}$/.exec(t) ?? /^\\frac(\d)(\d)$/.exec(t) ?? /^([^/]+)\/([^/]+)$/.exec(t);
  if (m?.[1] && m[2]) {
    const a = parseNumber(m[1]);
    const b = parseNumber(m[2]);
    if (a === null || b === null || b === 0) return null;
    return (sign * a) / b;
  }
  m = /^(\d+\.?\d*)?\\sqrt\{?(\d+\.?\d*)\}?$/.exec(t);
  if (m?.[2]) return sign * (m[1] ? Number(m[1]) : 1) * Math.sqrt(Number(m[2]));
  m = /^(\d+\.?\d*)?\\pi$/.exec(t);
  if (m) return sign * (m[1] ? Number(m[1]) : 1) * Math.PI;
  return null;
}

/**
 * Whether `given` equals `expected` as numbers: within a relative 1e-6 (absolute 1e-9 near 0),
 * or, when `expectedText` is a decimal written with k digits, equal once both are rounded to k
 * digits (a ground truth of `0.333` accepts `1/3`; `0.34` does not).
 */
export function numbersMatch(given: number, expected: number, expectedText?: string): boolean {
  if (!Number.isFinite(given) || !Number.isFinite(expected)) return false;
  const tol = Math.max(1e-6 * Math.max(Math.abs(given), Math.abs(expected)), 1e-9);
  if (Math.abs(given - expected) <= tol) return true;
  const decimals = expectedText ? /\.(\d+)$/.exec(normalizeMathAnswer(expectedText))?.[1]?.length : undefined;
  if (decimals !== undefined && decimals > 0) {
    const f = 10 ** decimals;
    return Math.round(given * f) === Math.round(expected * f);
  }
  return false;
}

/** Splits a tuple / list answer at top-level commas: `(1, \frac{1}{2})` → `['1', '\frac{1}{2}']`. */
function splitTuple(t: string): string[] | null {
  const inner = /^[([{](.*)[)\]}]$/.exec(t)?.[1] ?? t;
  const parts: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of inner) {
    if ('([{'.includes(ch)) depth++;
    if (')]}'.includes(ch)) depth--;
    if (ch === ',' && depth === 0) {
      parts.push(cur);
      cur = '';
    } else cur += ch;
  }
  parts.push(cur);
  return parts.length > 1 ? parts : null;
}

/**
 * Whether a model's math answer matches the ground truth: numerically when both parse as
 * numbers, element by element for tuples, else as normalized strings. Never throws.
 */
export function mathAnswersMatch(given: string, expected: string): boolean {
  const g = normalizeMathAnswer(given);
  const e = normalizeMathAnswer(expected);
  if (g === e && g !== '') return true;
  const gn = parseNumber(g);
  const en = parseNumber(e);
  if (gn !== null && en !== null) return numbersMatch(gn, en, expected);
  // "1,000" parses above; a tuple with commas only gets here when it is not a number.
  const gt = splitTuple(g);
  const et = splitTuple(e);
  if (gt && et && gt.length === et.length && g[0] === e[0]) return gt.every((x, i) => mathAnswersMatch(x, et[i] as string));
  return false;
}

/** The letters of `count` choices: A, B, C, ... */
export function choiceLetters(count: number): string[] {
  return Array.from({ length: count }, (_, i) => String.fromCharCode(65 + i));
}

/**
 * The choice letter a multiple-choice response settles on, or null. Looks, in order, for the
 * last `\boxed{X}`, the last "answer is X" / "Answer: (X)", then a response that is only the
 * letter (`B`, `(B)`, `B.`, `B) text`), then a choice's exact text. `letters` bounds what counts.
 */
export function extractChoice(text: string, letters: string[], choiceTexts: string[] = []): string | null {
  const allowed = new Set(letters.map((l) => l.toUpperCase()));
  const pick = (s: string | null | undefined): string | null => {
    if (!s) return null;
    const m = /^\s*\(?\s*\\?(?:text\{)?([A-Za-z])\}?\s*\)?\s*(?:[.:)]|$|\s)/.exec(s);
    const l = m?.[1]?.toUpperCase();
    return l && allowed.has(l) ? l : null;
  };
  const boxed = extractBoxed(text);
  if (boxed !== null) {
    const l = pick(boxed);
    if (l) return l;
  }
  const said = [...text.matchAll(/answer\s*(?:is|:)?\s*:?\s*(?:option\s*)?(\(?[A-Za-z]\)?)(?![A-Za-z])/gi)];
  for (let i = said.length - 1; i >= 0; i--) {
    const l = pick(said[i]?.[1]);
    if (l) return l;
  }
  const whole = pick(text.trim().length <= 80 ? text : null);
  if (whole) return whole;
  const norm = (s: string) => s.trim().toLowerCase().replace(/[.\s]+$/, '');
  const idx = choiceTexts.findIndex((c) => norm(c) === norm(text));
  if (idx >= 0 && letters[idx]) return letters[idx].toUpperCase();
  return null;
}
