// The reward-first panels of the rollout view: the GRPO group (members side by side) and the
// eval panel (per-test report, eval output, the git patch as a diff); the token view is tokens.js.
// Each renders into its root from plain data; the DOM they build is bounded whatever the rollout's size.

// @ts-check
import { fmtReward } from './format.js';

/**
 * The rollout's result as GET /v1/rollouts/:id gives it, with the fields the eval panel reads.
 * @typedef {{ reward?: number|null, resolved?: boolean|null, evalDetails?: Record<string, unknown>|null, eval_details?: Record<string, unknown>|null, git_patch?: unknown, [field: string]: unknown }} RolloutResult
 */

/**
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {string} [className]
 * @param {string} [text]
 * @returns {HTMLElementTagNameMap[K]}
 */
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
 * @param {ReturnType<typeof import('./rewards.js').describeGroup> | null} group
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

/**
 * A unified diff with added, removed and hunk lines coloured.
 * @param {string} patch
 */
function renderDiff(patch) {
  const pre = el('pre', 'diff');
  for (const line of patch.split('\n')) {
    const cls = line.startsWith('+++') || line.startsWith('---') ? 'd-file' : line.startsWith('+') ? 'd-add' : line.startsWith('-') ? 'd-del' : line.startsWith('@@') ? 'd-hunk' : '';
    pre.append(el('span', cls, `${line}\n`));
  }
  return pre;
}

/**
 * The per-test rows of an eval report, in any of the shapes handlers give them.
 * @param {Record<string, unknown>} details
 * @returns {Array<{ name: string, status: string, kind: string }>} kind as the handler names it (a string)
 */
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
 * @param {RolloutResult | null | undefined} result the rollout's result (GET /v1/rollouts/:id)
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

/**
 * One JSON object per line: the format trainers and `rollout run` read.
 * @param {unknown[]} items
 */
export function toJsonl(items) {
  return items.map((x) => JSON.stringify(x)).join('\n') + (items.length > 0 ? '\n' : '');
}

/**
 * Saves `text` as a file through a temporary object URL.
 * @param {string} name
 * @param {string} text
 */
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
