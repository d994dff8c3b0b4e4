/** The reasoning block of a turn, cut out of its text. */
export interface ReasoningSplit {
  /** Inner text of the block, trimmed; null when the turn has no block. */
  reasoning: string | null;
  /** The block exactly as sampled (with its tags and the whitespace after it); '' when none. */
  raw: string;
  /** The text after the block. */
  rest: string;
}

/** Reasoning formats by name: `think` is `<think>…</think>` (Qwen3, DeepSeek-R1, QwQ). */
export const REASONING_FORMATS = ['think'] as const;
export type ReasoningFormat = (typeof REASONING_FORMATS)[number];

const OPEN = '<think>';
const CLOSE = '</think>';

/**
 * Splits a leading `<think>…</think>` block off the turn. A turn that has `</think>` but no
 * opening tag began inside the block (DeepSeek-R1's generation prompt ends with `<think>\n`); a
 * turn that opened the block and never closed it (cut by max_tokens) is all reasoning.
 * Tool calls inside the block are not calls. Never throws.
 */
export function splitThink(text: string): ReasoningSplit {
  const open = text.indexOf(OPEN);
  const close = text.indexOf(CLOSE);
  const leading = open >= 0 && text.slice(0, open).trim().length === 0;
  if (close < 0) {
    if (!leading) return { reasoning: null, raw: '', rest: text };
    return { reasoning: text.slice(open + OPEN.length).trim(), raw: text, rest: '' };
  }
  if (open >= 0 && open > close) return { reasoning: null, raw: '', rest: text };
  if (open >= 0 && !leading) return { reasoning: null, raw: '', rest: text };
  const from = open >= 0 ? open + OPEN.length : 0;
  let end = close + CLOSE.length;
  while (end < text.length && /\s/.test(text[end]!)) end++;
  return { reasoning: text.slice(from, close).trim(), raw: text.slice(0, end), rest: text.slice(end) };
}
