// The reward-first panels of the rollout view: the GRPO group (members side by side), the token
// view (loss mask and logprob heat map, per-turn finish reason, backend and weight version) and
// the eval panel (per-test report, eval output, the git patch as a diff). Each renders into its
// root from plain data; the DOM they build is bounded whatever the rollout's size.

import { fmtReward } from './format.js';

/** Token cells drawn at most; a longer trajectory shows its tail and says how much is hidden. */
export const MAX_TOKEN_CELLS = 6000;

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

/**
 * The group of the selected rollout: one card per member (trajectory id, outcome, reward, GRPO
 * advantage), the selected one outlined, and a "no signal" flag when every member ended with
 * the same reward. `group` is {@link describeGroup}'s answer, or null when the rollout has none.
 * @param {HTMLElement} root
 * @param {any} group
 * @param {string} selectedId
 * @param {(id: string) => void} onSelect
 */
export function renderGroup(root, group, selectedId, onSelect) {
  root.replaceChildren();
  if (group === null) {
    root.append(el('div', 'muted', 'not part of a group'));
    root.dataset.members = '0';
    return;
  }
  const head = el('div', 'group-head');
  head.append(el('span', '', `group ${group.id} · ${group.members.length} members · mean ${group.mean === null ? '–' : group.mean.toFixed(3)} · std ${group.std === null ? '–' : group.std.toFixed(3)}`));
  if (group.noSignal) head.append(el('span', 'no-signal', 'no signal: all rewards equal (advantage 0)'));
  root.append(head);
  const cards = el('div', 'group-members');
  for (const m of group.members) {
    const card = el('button', `member${m.id === selectedId ? ' selected' : ''}`);
    card.type = 'button';
    card.dataset.id = m.id;
    card.append(el('div', 'member-id', `#${m.trajectoryId ?? '?'}`));
    card.append(el('div', m.outcome ? `outcome-${m.outcome}` : 'muted', m.outcome ?? 'running'));
    card.append(el('div', 'member-reward', m.reward === null ? 'reward –' : `reward ${fmtReward(m.reward)}`));
    const adv = el('div', 'member-adv', m.advantage === null ? 'adv –' : `adv ${m.advantage >= 0 ? '+' : ''}${m.advantage.toFixed(2)}`);
    if (m.advantage !== null) adv.classList.add(m.advantage > 0 ? 'pos' : m.advantage < 0 ? 'neg' : 'zero');
    card.append(adv);
    card.addEventListener('click', () => onSelect(m.id));
    cards.append(card);
  }
  root.append(cards);
  root.dataset.members = String(group.members.length);
  root.dataset.noSignal = String(group.noSignal);
}

/** A logprob as a background: sure tokens cool, unlikely ones hot. */
function heat(logprob) {
  const p = Math.exp(Math.max(-20, Math.min(0, logprob)));
  // hue 0 (red, p≈0) … 210 (blue, p≈1)
  return `hsl(${Math.round(210 * p)}, 70%, ${Math.round(28 + 10 * p)}%)`;
}

/**
 * The token view: every turn's header (finish reason, a mark when the token limit cut it,
 * backend, weight version, token source), then the tokens as cells — prompt and tool tokens
 * grey (loss mask 0), sampled tokens coloured by their logprob (mask 1). Hover a cell for its
 * position, id, mask and logprob.
 * @param {HTMLElement} root
 * @param {any} trajectory the result's `trajectory` (tokens, lossMask, logprobs, turns)
 */
export function renderTokens(root, trajectory) {
  root.replaceChildren();
  if (!trajectory || !Array.isArray(trajectory.tokens)) {
    root.append(el('div', 'muted', 'no token trajectory (the rollout has not ended, or its result is not available)'));
    return;
  }
  const { tokens, lossMask = [], logprobs = [], turns = [] } = trajectory;
  let sampled = 0;
  for (const m of lossMask) sampled += m;
  root.append(el('div', 'muted', `${tokens.length} tokens · ${sampled} sampled (loss mask 1) · ${tokens.length - sampled} prompt/tool (mask 0)`));
  const turnList = el('ol', 'turns');
  turns.forEach((t, i) => {
    const cut = t.finishReason === 'length';
    const parts = [
      `turn ${i}`,
      `${t.outputIds?.length ?? 0} tokens`,
      `finish ${t.finishReason}${cut ? ' (cut by the token limit)' : ''}`,
      `backend ${t.backendId}`,
      `weights ${t.weightVersion ?? '–'}`,
      t.tokenSource ? `tokens from ${t.tokenSource}` : '',
    ];
    const li = el('li', cut ? 'turn cut' : 'turn', parts.filter(Boolean).join(' · '));
    li.dataset.finish = t.finishReason;
    turnList.append(li);
  });
  root.append(turnList);
  // Where each turn's sampled span starts, to mark turn boundaries in the cells.
  const turnStart = new Map();
  turns.forEach((t, i) => turnStart.set(t.promptIds?.length ?? -1, i));
  const strip = el('div', 'token-strip');
  const from = Math.max(0, tokens.length - MAX_TOKEN_CELLS);
  if (from > 0) strip.append(el('span', 'muted', `… ${from} earlier tokens not drawn `));
  const frag = document.createDocumentFragment();
  for (let i = from; i < tokens.length; i++) {
    const mask = lossMask[i] ?? 0;
    const cell = document.createElement('span');
    cell.className = mask === 1 ? 'tok tok-sampled' : 'tok tok-prompt';
    if (turnStart.has(i)) cell.classList.add('tok-turn');
    if (mask === 1) cell.style.background = heat(logprobs[i] ?? 0);
    cell.title = `#${i} id ${tokens[i]} · mask ${mask}${mask === 1 ? ` · logprob ${Number(logprobs[i] ?? 0).toFixed(3)}` : ''}`;
    frag.append(cell);
  }
  strip.append(frag);
  root.append(strip);
  root.dataset.tokens = String(tokens.length);
  root.dataset.sampled = String(sampled);
}

/** A unified diff with added, removed and hunk lines coloured. */
function renderDiff(patch) {
  const pre = el('pre', 'diff');
  for (const line of patch.split('\n')) {
    const cls = line.startsWith('+++') || line.startsWith('---') ? 'd-file' : line.startsWith('+') ? 'd-add' : line.startsWith('-') ? 'd-del' : line.startsWith('@@') ? 'd-hunk' : '';
    pre.append(el('span', cls, `${line}\n`));
  }
  return pre;
}

/** The per-test rows of an eval report, in any of the shapes handlers give them. */
function testRows(details) {
  const list = details.tests ?? details.report ?? details.test_results ?? null;
  if (Array.isArray(list)) {
    return list
      .filter((t) => t && typeof t === 'object')
      .map((t) => ({ name: String(t.name ?? t.test ?? '?'), status: String(t.status ?? t.outcome ?? (t.passed === true ? 'passed' : t.passed === false ? 'failed' : '?')), kind: t.kind ?? t.group ?? '' }));
  }
  if (list && typeof list === 'object') return Object.entries(list).map(([name, status]) => ({ name, status: String(status), kind: '' }));
  return [];
}

/**
 * The eval panel: reward and resolved, the per-test report when the handler gives one, the
 * eval command's output, the git patch as a diff, and any other detail as `key: value`.
 * @param {HTMLElement} root
 * @param {any} result the rollout's result (GET /v1/rollouts/:id)
 */
export function renderEval(root, result) {
  root.replaceChildren();
  const details = result?.evalDetails ?? result?.eval_details ?? null;
  const patch = details?.git_patch ?? result?.git_patch ?? null;
  if (!result || (details === null && !patch)) {
    root.append(el('div', 'muted', result ? 'no evaluation details' : 'not evaluated yet'));
    return;
  }
  root.append(el('div', '', `reward ${fmtReward(result.reward) || '–'} · resolved ${result.resolved ?? '–'}`));
  const rows = details ? testRows(details) : [];
  if (rows.length > 0) {
    const table = el('table', 'tests');
    for (const r of rows) {
      const tr = el('tr', `test-${/pass|ok|success/i.test(r.status) ? 'pass' : /fail|error/i.test(r.status) ? 'fail' : 'other'}`);
      tr.append(el('td', '', r.kind), el('td', '', r.name), el('td', '', r.status));
      table.append(tr);
    }
    root.append(table);
  }
  if (details) {
    const rest = el('dl', 'details');
    for (const [k, v] of Object.entries(details)) {
      if (k === 'git_patch' || k === 'output' || k === 'tests' || k === 'report' || k === 'test_results') continue;
      rest.append(el('dt', '', k), el('dd', '', typeof v === 'string' ? v : JSON.stringify(v)));
    }
    if (rest.childElementCount > 0) root.append(rest);
    if (typeof details.output === 'string' && details.output.length > 0) {
      root.append(el('div', 'muted', 'eval output'));
      root.append(el('pre', 'eval-output', details.output));
    }
  }
  if (typeof patch === 'string' && patch.length > 0) {
    root.append(el('div', 'muted', 'git patch'));
    root.append(renderDiff(patch));
  }
}

/** One JSON object per line: the format trainers and `rollout run` read. */
export function toJsonl(items) {
  return items.map((x) => JSON.stringify(x)).join('\n') + (items.length > 0 ? '\n' : '');
}

/** Saves `text` as a file through a temporary object URL. */
export function download(name, text, type = 'application/json') {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}
