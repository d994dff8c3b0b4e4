// Tree rollouts (#26): a group whose rollouts were forked, drawn as a tree — each node a card,
// its branches side by side under their branch point (the turn they were forked at), with the
// children's reward mean and spread there. Built from the page's rollout records, which carry
// `parentId` and `branchTurn` from the `rollout.submitted` event (or the summary's `parent_id`,
// `branch_turn`). The pure part (`treeOf`) has no DOM and is tested under Node.
// @ts-check

/**
 * @typedef {{ id: string, parentId?: string|null, branchTurn?: number|null, reward?: number|null }} TreeMember
 */
/**
 * @template {TreeMember} T
 * @typedef {{ record: T, points: Array<{ turn: number, mean: number|null, std: number|null, children: TreeNode<T>[] }> }} TreeNode
 */

/**
 * The tree of `members` (records with id, parentId, branchTurn, trajectoryId, outcome, reward):
 * its roots (members whose parent is not among them) and, per node, its branch points in turn
 * order, each with its children and their reward mean / population std (null when none graded).
 * @template {TreeMember} T
 * @param {T[]} members
 * @returns {{ roots: TreeNode<T>[], forked: boolean }}
 */
export function treeOf(members) {
  const byId = new Map(members.map((m) => [m.id, m]));
  /** @type {Map<string, T[]>} */
  const kids = new Map();
  /** @type {T[]} */
  const roots = [];
  for (const m of members) {
    const p = m.parentId ?? null;
    if (p !== null && byId.has(p)) {
      if (!kids.has(p)) kids.set(p, []);
      kids.get(p)?.push(m);
    } else roots.push(m);
  }
  /**
   * @param {T} m
   * @returns {TreeNode<T>}
   */
  const node = (m) => {
    /** @type {Map<number, T[]>} */
    const points = new Map();
    for (const c of kids.get(m.id) ?? []) {
      const t = c.branchTurn ?? 0;
      if (!points.has(t)) points.set(t, []);
      points.get(t)?.push(c);
    }
    return {
      record: m,
      points: [...points.entries()]
        .sort((a, b) => a[0] - b[0])
        .map(([turn, cs]) => {
          const graded = cs.map((c) => c.reward).filter((r) => typeof r === 'number');
          const mean = graded.length ? graded.reduce((a, b) => a + b, 0) / graded.length : null;
          const std = mean === null ? null : Math.sqrt(graded.reduce((a, b) => a + (b - mean) ** 2, 0) / graded.length);
          return { turn, mean, std, children: cs.map(node) };
        }),
    };
  };
  return { roots: roots.map(node), forked: members.some((m) => (m.parentId ?? null) !== null) };
}

/** @param {number|null|undefined} v */
const fmt = (v) => (v === null || v === undefined ? '–' : Number.isInteger(v) ? String(v) : v.toFixed(3));

/**
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {string} [cls]
 * @param {string} [text]
 * @returns {HTMLElementTagNameMap[K]}
 */
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

let styled = false;
/** The tree's styles, added once (kept here so the shared stylesheet is not touched). */
function ensureStyle() {
  if (styled) return;
  styled = true;
  const s = document.createElement('style');
  s.textContent = `
.tree-view { overflow-x: auto; padding: 4px 0; }
.tree-head { color: #555; margin-bottom: 4px; }
.tree-node { display: flex; flex-direction: column; align-items: center; margin: 0 4px; }
.tree-card { border: 1px solid #bbb; border-radius: 4px; padding: 2px 6px; font-size: 12px; cursor: pointer; white-space: nowrap; background: #fff; }
.tree-card.selected { border-color: #1565c0; box-shadow: 0 0 0 2px #90caf9; }
.tree-card[data-outcome="completed"] { background: #e8f5e9; }
.tree-card[data-outcome="truncated"] { background: #fff8e1; }
.tree-card[data-outcome="infra-error"], .tree-card[data-outcome="task-error"], .tree-card[data-outcome="timed-out"] { background: #ffebee; }
.tree-point { border-top: 1px solid #999; margin-top: 6px; padding-top: 2px; text-align: center; }
.tree-point-label { font-size: 11px; color: #555; }
.tree-children { display: flex; flex-direction: row; align-items: flex-start; justify-content: center; }
.tree-roots { display: flex; flex-direction: row; align-items: flex-start; }
`;
  document.head.append(s);
}

/**
 * Draws the tree of the selected rollout's group into `root` (hidden when the group has no
 * forked member). `rollouts` is the page's Map of records.
 * @param {HTMLElement} root
 * @param {Map<string, import('./types.js').RolloutRecord>} rollouts
 * @param {import('./types.js').RolloutRecord | null | undefined} selected the selected record
 * @param {(id: string) => void} onSelect
 */
export function renderTree(root, rollouts, selected, onSelect) {
  root.replaceChildren();
  const members = selected?.groupId ? [...rollouts.values()].filter((r) => r.groupId === selected.groupId) : [];
  const tree = treeOf(members);
  root.hidden = !tree.forked;
  if (!tree.forked) return;
  ensureStyle();
  root.classList.add('tree-view');
  root.append(el('div', 'tree-head', `tree · ${members.length} rollouts · siblings side by side under their branch point`));
  /**
   * @param {TreeNode<import('./types.js').RolloutRecord>} n
   * @returns {HTMLElement}
   */
  const draw = (n) => {
    const box = el('div', 'tree-node');
    const r = n.record;
    const card = el('div', 'tree-card', `${r.trajectoryId ?? r.id.slice(0, 8)} · ${r.outcome ?? r.state ?? '…'} · reward ${fmt(r.reward)}`);
    card.dataset.outcome = r.outcome ?? '';
    if (r.id === /** @type {import('./types.js').RolloutRecord} */ (selected).id) card.classList.add('selected');
    card.title = r.id;
    card.addEventListener('click', () => onSelect(r.id));
    box.append(card);
    for (const p of n.points) {
      const point = el('div', 'tree-point');
      point.append(el('div', 'tree-point-label', `@turn ${p.turn} · ${p.children.length} branches · mean ${fmt(p.mean)} ± ${fmt(p.std)}`));
      const row = el('div', 'tree-children');
      for (const c of p.children) row.append(draw(c));
      point.append(row);
      box.append(point);
    }
    return box;
  };
  const roots = el('div', 'tree-roots');
  for (const n of tree.roots) roots.append(draw(n));
  root.append(roots);
}
