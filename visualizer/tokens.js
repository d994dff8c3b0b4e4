// @ts-check
// The token view of an ended rollout: every token of its trajectory as the text it decodes to
// (from GET /v1/rollouts/:id/tokens), prompt and tool tokens (loss mask 0) grey, sampled tokens
// (mask 1) on a colour scale of their logprob. Hovering a token shows its position, id, text,
// mask, logprob, turn and weight version. A 30k-token trajectory stays fast: tokens are drawn in
// chunks, and a chunk only when it scrolls near the view.

/**
 * @typedef {{ promptIds?: number[], outputIds?: number[], logprobs?: number[], backendId?: string, weightVersion?: string|number|null, finishReason?: string, tokenSource?: string }} Turn
 * @typedef {{ tokenStart: number, tokenEnd: number, turnStart: number, turnEnd: number }} Segment
 * @typedef {{ tokens: number[], lossMask?: number[], logprobs?: number[], turns?: Turn[], segments?: Segment[] }} Trajectory
 * @typedef {{ state: 'pending' } | { state: 'loaded', text: string[], codec: string, assumed: boolean } | { state: 'unavailable', reason: string }} TextEntry
 * @typedef {{ apiBase: string, headers: Record<string, string> }} Api
 */

/** Tokens per chunk: a chunk's DOM is built at once, when it first comes near the view. */
export const CHUNK = 1500;
/** Logprobs at or below this share the hottest colour. */
export const LOGPROB_FLOOR = -10;

/**
 * The background of a sampled token: blue for a sure one (logprob 0), through green and yellow,
 * to red for an unlikely one (logprob ≤ {@link LOGPROB_FLOOR}). Linear in the logprob, so the
 * scale separates 0 from -0.5 as well as -5 from -10. Pure.
 * @param {number} logprob
 */
export function logprobColor(logprob) {
  const x = Number.isFinite(logprob) ? Math.max(LOGPROB_FLOOR, Math.min(0, logprob)) : LOGPROB_FLOOR;
  const hue = Math.round(220 * (1 - x / LOGPROB_FLOOR));
  return `hsl(${hue}, 65%, 32%)`;
}

/**
 * Where each turn's sampled tokens are: `[start, end)` in the flat token list, per turn, in
 * order. A trajectory in segments (a harness agent that rewrote its history) has offsets per
 * segment. Pure.
 * @param {Trajectory} t
 * @returns {{ start: number, end: number, turn: number }[]}
 */
export function sampledRanges(t) {
  const turns = t.turns ?? [];
  const segments = Array.isArray(t.segments) && t.segments.length > 0 ? t.segments : [{ tokenStart: 0, tokenEnd: t.tokens.length, turnStart: 0, turnEnd: turns.length }];
  const out = [];
  for (const s of segments) {
    for (let k = s.turnStart; k < s.turnEnd; k++) {
      const turn = turns[k];
      if (turn === undefined) continue;
      const start = s.tokenStart + (turn.promptIds?.length ?? 0);
      out.push({ start, end: start + (turn.outputIds?.length ?? 0), turn: k });
    }
  }
  return out.sort((a, b) => a.start - b.start);
}

/**
 * The turn a token belongs to: the turn that sampled it, or — for a prompt, template or tool
 * token — the turn whose prompt it first appears in (`prompt: true`); null after the last turn.
 * `ranges` is {@link sampledRanges}'s answer. Binary search: O(log turns).
 * @param {{ start: number, end: number, turn: number }[]} ranges
 * @param {number} i
 * @returns {{ turn: number, prompt: boolean } | null}
 */
export function turnOf(ranges, i) {
  let lo = 0;
  let hi = ranges.length;
  // The first range that ends after i.
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (/** @type {{ end: number }} */ (ranges[mid]).end <= i) lo = mid + 1;
    else hi = mid;
  }
  const r = ranges[lo];
  if (r === undefined) return null;
  return i >= r.start ? { turn: r.turn, prompt: false } : { turn: r.turn, prompt: true };
}

/** A token's text made visible: newlines and tabs shown as marks (and kept as breaks). */
function visible(/** @type {string} */ text) {
  return text.replace(/\t/g, '→\t').replace(/\n/g, '↵\n');
}

/** Token texts per rollout id; fetched once per page. @type {Map<string, TextEntry>} */
const texts = new Map();

/**
 * The decoded text of each token of a rollout, fetched once; `onLoad` runs when it arrives.
 * @param {Api} api
 * @param {string} id
 * @param {() => void} onLoad
 * @returns {TextEntry}
 */
function tokenTexts(api, id, onLoad) {
  const hit = texts.get(id);
  if (hit !== undefined) return hit;
  texts.set(id, { state: 'pending' });
  fetch(`${api.apiBase}/v1/rollouts/${encodeURIComponent(id)}/tokens`, { headers: api.headers })
    .then(async (res) => {
      if (!res.ok) throw new Error(`GET /v1/rollouts/${id}/tokens: ${res.status}`);
      const body = await res.json();
      if (!Array.isArray(body?.text)) throw new Error('no text in the answer');
      texts.set(id, { state: 'loaded', text: body.text, codec: String(body.codec ?? '?'), assumed: body.assumed === true });
    })
    .catch((/** @type {unknown} */ err) => texts.set(id, { state: 'unavailable', reason: err instanceof Error ? err.message : String(err) }))
    .finally(onLoad);
  return /** @type {TextEntry} */ (texts.get(id));
}

/**
 * @param {string} tag
 * @param {string} [className]
 * @param {string} [text]
 */
function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

/**
 * Renders the token view of rollout `id` into `root` from its result (`GET /v1/rollouts/:id`),
 * fetching the token texts on first use and rendering again when they arrive (if `root` still
 * shows the same rollout).
 * @param {HTMLElement} root
 * @param {{ trajectory?: Trajectory } | null | undefined} result
 * @param {string} id
 * @param {Api} api
 */
export function renderTokenView(root, result, id, api) {
  const trajectory = result?.trajectory;
  root.dataset.rollout = id;
  if (!trajectory || !Array.isArray(trajectory.tokens)) {
    root.replaceChildren(el('div', 'muted', 'no token trajectory (the rollout has not ended, or its result is not available)'));
    delete root.dataset.tokens;
    delete root.dataset.text;
    return;
  }
  const entry = tokenTexts(api, id, () => {
    if (root.dataset.rollout === id) renderTokenView(root, result, id, api);
  });
  drawTokens(root, trajectory, entry);
}

/**
 * The view itself, from a trajectory and its texts (exported for a test of its own).
 * @param {HTMLElement} root
 * @param {Trajectory} trajectory
 * @param {TextEntry} entry
 */
export function drawTokens(root, trajectory, entry) {
  const { tokens, lossMask = [], logprobs = [], turns = [] } = trajectory;
  let sampled = 0;
  for (const m of lossMask) sampled += m;
  const head = el('div', 'muted', `${tokens.length} tokens · ${sampled} sampled (loss mask 1) · ${tokens.length - sampled} prompt/tool (mask 0)`);
  const note =
    entry.state === 'loaded'
      ? `text decoded with ${entry.codec}${entry.assumed ? ' (assumed: the run does not record its tokenizer)' : ''}`
      : entry.state === 'pending'
        ? 'loading token text…'
        : `token text unavailable (${entry.reason}): ids shown`;
  const legend = el('div', 'tv-legend');
  legend.append(el('span', 'tv-key tv-prompt-key', 'prompt / tool (mask 0)'), el('span', 'tv-scale', ''), el('span', 'muted', `sampled: logprob 0 … ≤ ${LOGPROB_FLOOR}`), el('span', 'muted tv-note', note));

  const turnList = el('ol', 'turns');
  turns.forEach((t, i) => {
    const cut = t.finishReason === 'length';
    const parts = [`turn ${i}`, `${t.outputIds?.length ?? 0} tokens`, `finish ${t.finishReason}${cut ? ' (cut by the token limit)' : ''}`, `backend ${t.backendId}`, `weights ${t.weightVersion ?? '–'}`, t.tokenSource ? `tokens from ${t.tokenSource}` : ''];
    const li = el('li', cut ? 'turn cut' : 'turn', parts.filter(Boolean).join(' · '));
    li.dataset.finish = String(t.finishReason);
    turnList.append(li);
  });

  const ranges = sampledRanges(trajectory);
  const text = entry.state === 'loaded' ? entry.text : null;
  const strip = el('div', 'tv-strip');
  const tip = el('div', 'tv-tip');
  tip.hidden = true;

  /** Builds chunk `c`'s token spans into `box`. */
  const fill = (/** @type {HTMLElement} */ box, /** @type {number} */ c) => {
    const frag = document.createDocumentFragment();
    const end = Math.min(tokens.length, (c + 1) * CHUNK);
    let range = 0;
    for (let i = c * CHUNK; i < end; i++) {
      while (range < ranges.length && /** @type {{ end: number }} */ (ranges[range]).end <= i) range++;
      const r = ranges[range];
      const mask = lossMask[i] ?? 0;
      const span = document.createElement('span');
      span.className = mask === 1 ? 'tok tok-sampled' : 'tok tok-prompt';
      if (r !== undefined && i === r.start) span.classList.add('tok-turn');
      if (mask === 1) span.style.background = logprobColor(logprobs[i] ?? 0);
      span.dataset.i = String(i);
      span.textContent = text !== null ? visible(text[i] ?? '') : `‹${tokens[i]}›`;
      frag.append(span);
    }
    box.replaceChildren(frag);
    box.dataset.filled = 'true';
    box.style.minHeight = '';
  };

  const chunks = Math.ceil(tokens.length / CHUNK);
  /** @type {IntersectionObserver | null} */
  let observer = null;
  for (let c = 0; c < chunks; c++) {
    const box = el('div', 'tv-chunk');
    box.dataset.chunk = String(c);
    if (c === 0) fill(box, 0);
    else {
      // A placeholder about as tall as the chunk will be, so the scroll bar is roughly right.
      let chars = 0;
      const end = Math.min(tokens.length, (c + 1) * CHUNK);
      for (let i = c * CHUNK; i < end; i++) chars += text !== null ? (text[i] ?? '').length : 7;
      box.style.minHeight = `${Math.max(18, Math.ceil(chars / 90) * 18)}px`;
      observer ??= new IntersectionObserver(
        (seen) => {
          for (const e of seen) {
            if (!e.isIntersecting) continue;
            const target = /** @type {HTMLElement} */ (e.target);
            observer?.unobserve(target);
            fill(target, Number(target.dataset.chunk));
          }
        },
        { root: strip, rootMargin: '600px 0px' },
      );
      observer.observe(box);
    }
    strip.append(box);
  }

  strip.addEventListener('mouseover', (e) => {
    const span = /** @type {HTMLElement} */ (e.target).closest('.tok');
    if (!(span instanceof HTMLElement) || span.dataset.i === undefined) return;
    const i = Number(span.dataset.i);
    tip.textContent = tokenInfo(trajectory, ranges, text, i);
    tip.hidden = false;
    const box = span.getBoundingClientRect();
    const base = root.getBoundingClientRect();
    tip.style.left = `${Math.max(0, Math.min(box.left - base.left, base.width - 320))}px`;
    tip.style.top = `${box.bottom - base.top + 4}px`;
  });
  strip.addEventListener('mouseleave', () => {
    tip.hidden = true;
  });

  root.replaceChildren(head, legend, turnList, strip, tip);
  root.dataset.tokens = String(tokens.length);
  root.dataset.sampled = String(sampled);
  root.dataset.text = entry.state;
}

/**
 * The hover line of token `i`: position, id, text, mask, logprob, turn and weight version.
 * @param {Trajectory} t
 * @param {{ start: number, end: number, turn: number }[]} ranges
 * @param {string[] | null} text
 * @param {number} i
 */
export function tokenInfo(t, ranges, text, i) {
  const mask = t.lossMask?.[i] ?? 0;
  const where = turnOf(ranges, i);
  const turn = where === null ? undefined : t.turns?.[where.turn];
  const lines = [`token #${i} · id ${t.tokens[i]}${text !== null ? ` · ${JSON.stringify(text[i] ?? '')}` : ''}`];
  if (mask === 1) {
    const lp = Number(t.logprobs?.[i] ?? 0);
    lines.push(`sampled (mask 1) · logprob ${lp.toFixed(3)} (p ${Math.exp(lp).toFixed(3)})`);
  } else lines.push('prompt / tool (mask 0)');
  if (where === null) lines.push('after the last turn');
  else lines.push(`turn ${where.turn}${where.prompt ? ' (its prompt)' : ''} · weight version ${where.prompt ? '–' : (turn?.weightVersion ?? '–')}${turn?.backendId ? ` · backend ${turn.backendId}` : ''}`);
  return lines.join('\n');
}
