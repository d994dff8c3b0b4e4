// @ts-check
// The GRPO groups table: one row per group — size, rewarded members, mean, std, advantage
// spread (max − min of reward − mean) and a no-signal flag — sortable by every column, each row
// listing its members as links that open them (#rollout=<id>).

import { describeGroup } from './rewards.js';
import { fmtReward } from './format.js';

/**
 * @typedef {{ id: string, trajectoryId: unknown, outcome: string|null, reward: number|null }} Member
 * @typedef {{ id: string, size: number, rewarded: number, mean: number|null, std: number|null, spread: number|null, noSignal: boolean, complete: boolean, members: Member[] }} GroupRow
 * @typedef {'id'|'size'|'mean'|'std'|'spread'|'noSignal'} GroupKey
 */

/** Rows drawn at most (after sorting); the rest are counted. */
export const MAX_GROUP_ROWS = 500;

/** The columns, in order: key, header, numeric. @type {Array<[GroupKey, string, boolean]>} */
export const GROUP_COLUMNS = [
  ['id', 'group', false],
  ['size', 'size', true],
  ['mean', 'mean', true],
  ['std', 'std', true],
  ['spread', 'adv. spread', true],
  ['noSignal', 'no signal', false],
];

/**
 * One table row per group, from {@link RewardStats}'s groups (`id -> { id, members: Map }`).
 * The spread is max − min of (reward − mean) over the rewarded members: the range of the
 * (unnormalised) GRPO advantages; 0 for a group with no signal. Pure.
 * @param {Iterable<{ id: string, members: Map<string, Member> }>} groups
 * @returns {GroupRow[]}
 */
export function groupRows(groups) {
  const rows = [];
  for (const g of groups) {
    const d = describeGroup(g.id, [...g.members.values()]);
    const rewards = d.members.filter((m) => m.reward !== null).map((m) => /** @type {number} */ (m.reward));
    const spread = rewards.length === 0 ? null : Math.max(...rewards) - Math.min(...rewards);
    rows.push({ id: d.id, size: d.members.length, rewarded: rewards.length, mean: d.mean, std: d.std, spread, noSignal: d.noSignal, complete: d.complete, members: d.members });
  }
  return rows;
}

/**
 * Sorts rows in place by a column; a missing value (no reward yet) sorts last either way. Ties
 * keep their order (the sort is stable), then by id.
 * @param {GroupRow[]} rows
 * @param {GroupKey} key
 * @param {1|-1} dir
 */
export function sortGroupRows(rows, key, dir) {
  /** @type {(r: GroupRow) => number|string|null} */
  const value = key === 'noSignal' ? (r) => (r.noSignal ? 1 : 0) : (r) => r[key];
  return rows.sort((a, b) => {
    const x = value(a);
    const y = value(b);
    if (x === null || y === null) return x === y ? 0 : x === null ? 1 : -1;
    const c = x < y ? -1 : x > y ? 1 : 0;
    return c !== 0 ? c * dir : a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
  });
}

/** @param {number|null} x */
const fmt = (x) => (x === null ? '–' : x.toFixed(3));

/**
 * A sortable table of groups, drawn into `root` (a container of index.html). `update` redraws
 * it from the current groups when they changed (a version number) or the sort did.
 * @param {HTMLElement} root
 */
export function createGroupsTable(root) {
  /** @type {GroupKey} */
  let sortKey = 'spread';
  /** @type {1|-1} */
  let sortDir = -1;
  let seen = -1;
  let sortChanged = true;
  /** @type {{ values(): Iterable<{ id: string, members: Map<string, Member> }> }} */
  let lastGroups = new Map();

  const table = document.createElement('table');
  table.className = 'groups-table';
  const thead = document.createElement('thead');
  const headRow = document.createElement('tr');
  for (const [key, label, numeric] of GROUP_COLUMNS) {
    const th = document.createElement('th');
    th.textContent = label;
    th.dataset.sort = key;
    th.title = `sort by ${label} (again: reverse)`;
    if (numeric) th.className = 'num';
    th.addEventListener('click', () => {
      if (sortKey === key) sortDir = sortDir === 1 ? -1 : 1;
      // Numbers start largest first, the flag flagged first, the id alphabetical.
      else [sortKey, sortDir] = [key, key === 'id' ? 1 : -1];
      sortChanged = true;
      draw(lastGroups);
    });
    headRow.append(th);
  }
  const membersTh = document.createElement('th');
  membersTh.textContent = 'members (reward · click to open)';
  headRow.append(membersTh);
  thead.append(headRow);
  const tbody = document.createElement('tbody');
  table.append(thead, tbody);
  const caption = document.createElement('div');
  caption.className = 'muted groups-caption';
  root.replaceChildren(caption, table);

  /** @param {{ values(): Iterable<{ id: string, members: Map<string, Member> }> }} groups */
  function draw(groups) {
    lastGroups = groups;
    const rows = sortGroupRows(groupRows(groups.values()), sortKey, sortDir);
    for (const th of headRow.querySelectorAll('th[data-sort]')) {
      const h = /** @type {HTMLElement} */ (th);
      if (h.dataset.sort === sortKey) h.dataset.dir = sortDir === 1 ? 'asc' : 'desc';
      else delete h.dataset.dir;
    }
    const noSignal = rows.filter((r) => r.noSignal).length;
    caption.textContent = rows.length === 0 ? 'no GRPO groups yet (submit with n > 1 or a group id)' : `${rows.length} groups · ${noSignal} with no signal${rows.length > MAX_GROUP_ROWS ? ` · first ${MAX_GROUP_ROWS} shown` : ''} · click a header to sort`;
    const frag = document.createDocumentFragment();
    for (const r of rows.slice(0, MAX_GROUP_ROWS)) {
      const tr = document.createElement('tr');
      tr.dataset.group = r.id;
      if (r.noSignal) tr.className = 'no-signal-row';
      /** @param {string} text @param {string} [cls] */
      const td = (text, cls) => {
        const cell = document.createElement('td');
        cell.textContent = text;
        if (cls) cell.className = cls;
        tr.append(cell);
        return cell;
      };
      td(r.id).title = r.id;
      td(`${r.rewarded}/${r.size}`, 'num');
      td(fmt(r.mean), 'num');
      td(fmt(r.std), 'num');
      td(fmt(r.spread), 'num');
      td(r.noSignal ? 'no signal' : r.complete ? '' : 'running', r.noSignal ? 'no-signal' : 'muted');
      const links = td('', 'members');
      for (const m of r.members) {
        const a = document.createElement('a');
        a.href = `#rollout=${encodeURIComponent(m.id)}`;
        a.dataset.id = m.id;
        a.textContent = `#${m.trajectoryId ?? '?'} ${m.reward === null ? '–' : fmtReward(m.reward)}`;
        a.title = `${m.id} · ${m.outcome ?? 'running'}`;
        links.append(a, ' ');
      }
      frag.append(tr);
    }
    tbody.replaceChildren(frag);
    root.dataset.groups = String(rows.length);
    root.dataset.sort = `${sortKey}:${sortDir === 1 ? 'asc' : 'desc'}`;
    sortChanged = false;
  }

  return {
    /**
     * Redraws when the groups changed since the last draw (`version`) or the sort did.
     * @param {{ values(): Iterable<{ id: string, members: Map<string, Member> }> }} groups the groups by id (RewardStats#groups)
     * @param {number} version
     */
    update(groups, version) {
      if (version === seen && !sortChanged) return;
      seen = version;
      draw(groups);
    },
  };
}
