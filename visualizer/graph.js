// @ts-check
// A small state-graph renderer: lays out the leaf states of /visualizer/graph.json and draws
// them as SVG, with a box around the leaves of each compound state. The main flow runs left to
// right in breadth-first layers from the initial state; final states sit on a row of their own
// underneath, because nearly every state can reach `failed` / `cancelled` and those edges would
// otherwise cross the whole flow. Transitions on the machine root (any state -> cancelled) are
// a note under the graph rather than an arrow from every node.

const SVG_NS = 'http://www.w3.org/2000/svg';
const NODE_W = 112;
const NODE_H = 34;
const COL_W = 150;
const ROW_H = 70;
const PAD = 24;
const GROUP_PAD = 18;
// Room above the flow for back edges (acting -> llmCalling), which arc over it.
const ARC_ROOM = 44;

/**
 * @typedef {{ id: string, key: string, parent: string|null, type: string, initial: string|null, invokes?: string[], description?: string|null }} GraphState
 * @typedef {{ source: string, target: string|null, label: string, guard?: string|null }} GraphTransition
 * @typedef {{ id?: string, initial: string|null, states: GraphState[], transitions: GraphTransition[] }} Graph
 */

/**
 * An SVG element with attributes and optional text.
 * @param {string} name
 * @param {Record<string, string|number>} [attrs]
 * @param {string} [text]
 */
function el(name, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

/**
 * Positions for the leaf states (atomic and final) and the edges between them (deduplicated per
 * pair, labels merged), plus a box per compound state around its leaves. A transition into a
 * compound state lands on its initial leaf; one out of a compound state leaves from each of its
 * leaves; one defined on the machine root (source '') applies to every state and is listed in
 * `global` instead of drawn. Pure; exported for tests.
 * @param {Graph} graph
 */
export function layoutGraph(graph) {
  const byId = new Map(graph.states.map((s) => [s.id, s]));
  /** @type {Map<string, string[]>} */
  const children = new Map();
  for (const s of graph.states) {
    if (s.parent === null) continue;
    if (!children.has(s.parent)) children.set(s.parent, []);
    children.get(s.parent)?.push(s.id);
  }
  const isLeaf = (/** @type {string} */ id) => !children.has(id);
  const entryLeaf = (/** @type {string} */ id) => {
    let cur = byId.get(id);
    while (cur !== undefined && !isLeaf(cur.id)) cur = byId.get(cur.initial ?? children.get(cur.id)?.[0] ?? '');
    return cur?.id;
  };
  /** @type {(id: string) => string[]} */
  const leavesOf = (id) => (isLeaf(id) ? [id] : (children.get(id) ?? []).flatMap(leavesOf));
  const leaves = graph.states.filter((s) => isLeaf(s.id));

  const edges = new Map();
  const global = [];
  for (const t of graph.transitions) {
    if (t.target === null) continue;
    const target = entryLeaf(t.target);
    if (target === undefined) continue;
    if (t.source === '' || !byId.has(t.source)) {
      global.push({ label: t.label, target });
      continue;
    }
    for (const source of leavesOf(t.source)) {
      if (source === target) continue;
      const key = `${source}->${target}`;
      let e = edges.get(key);
      if (e === undefined) {
        e = { source, target, labels: [], details: [] };
        edges.set(key, e);
      }
      if (!e.labels.includes(t.label)) e.labels.push(t.label);
      const detail = t.guard ? `${t.label} if ${t.guard}` : t.label;
      if (!e.details.includes(detail)) e.details.push(detail);
    }
  }

  const isFinal = (/** @type {GraphState | undefined} */ s) => s?.type === 'final';
  const flow = leaves.filter((s) => !isFinal(s));
  const finals = leaves.filter(isFinal);
  const depth = new Map();
  const start = graph.initial !== null ? entryLeaf(graph.initial) : flow[0]?.id;
  if (start !== undefined && !isFinal(byId.get(start))) {
    depth.set(start, 0);
    const queue = [start];
    while (queue.length > 0) {
      const cur = queue.shift();
      for (const e of edges.values()) {
        if (e.source !== cur || depth.has(e.target) || isFinal(byId.get(e.target))) continue;
        depth.set(e.target, depth.get(cur) + 1);
        queue.push(e.target);
      }
    }
  }
  let maxDepth = Math.max(-1, ...depth.values());
  for (const s of flow) if (!depth.has(s.id)) depth.set(s.id, ++maxDepth);

  const pos = new Map();
  const rowsInCol = new Map();
  for (const s of flow) {
    const d = depth.get(s.id);
    const row = rowsInCol.get(d) ?? 0;
    rowsInCol.set(d, row + 1);
    pos.set(s.id, { x: PAD + d * COL_W, y: PAD + ARC_ROOM + GROUP_PAD + row * ROW_H });
  }
  const cols = Math.max(1, maxDepth + 1);
  const flowRows = Math.max(1, ...rowsInCol.values());
  const width = PAD * 2 + (cols - 1) * COL_W + NODE_W;
  const finalY = PAD + ARC_ROOM + GROUP_PAD + flowRows * ROW_H + ROW_H * 0.5;
  const span = width - PAD * 2 - NODE_W;
  // Each final state takes the free slot nearest the mean x of the states that lead to it, so
  // `done` sits under `evaluating` instead of across the picture; root-only ones fill the rest.
  const slots = finals.map((_, i) => PAD + (finals.length === 1 ? span / 2 : (span * i) / (finals.length - 1)));
  const free = new Set(slots.map((_, i) => i));
  const wanted = finals.map((s) => {
    const xs = [...edges.values()].filter((e) => e.target === s.id && pos.has(e.source)).map((e) => pos.get(e.source).x);
    return { s, x: xs.length > 0 ? xs.reduce((a, b) => a + b, 0) / xs.length : null };
  });
  const byDemand = /** @type {Array<{ s: GraphState, x: number }>} */ (wanted.filter((w) => w.x !== null)).sort((a, b) => {
    const spread = (/** @type {{ x: number }} */ w) => Math.min(...[...free].map((i) => Math.abs(slots[i] - w.x)));
    return spread(a) - spread(b);
  });
  for (const w of byDemand) {
    let best = -1;
    for (const i of free) if (best === -1 || Math.abs(slots[i] - w.x) < Math.abs(slots[best] - w.x)) best = i;
    free.delete(best);
    pos.set(w.s.id, { x: slots[best], y: finalY });
  }
  for (const w of wanted.filter((w) => w.x === null)) {
    const i = Math.min(...free);
    free.delete(i);
    pos.set(w.s.id, { x: slots[i], y: finalY });
  }
  const height = (finals.length > 0 ? finalY : PAD + ARC_ROOM + GROUP_PAD + (flowRows - 1) * ROW_H) + NODE_H + PAD + 12;

  const groups = [];
  for (const s of graph.states) {
    if (isLeaf(s.id)) continue;
    const ps = leavesOf(s.id).map((id) => pos.get(id)).filter(Boolean);
    if (ps.length === 0) continue;
    const x0 = Math.min(...ps.map((p) => p.x)) - 10;
    const y0 = Math.min(...ps.map((p) => p.y)) - GROUP_PAD + 2;
    const x1 = Math.max(...ps.map((p) => p.x)) + NODE_W + 10;
    const y1 = Math.max(...ps.map((p) => p.y)) + NODE_H + 8;
    groups.push({ id: s.id, key: s.key, x: x0, y: y0, w: x1 - x0, h: y1 - y0 });
  }
  return { nodes: leaves.map((s) => ({ ...s, ...pos.get(s.id) })), edges: [...edges.values()], groups, global, width, height, depth };
}

/** Where the segment from a box's centre towards (dx, dy) leaves the box. */
/**
 * @param {number} cx
 * @param {number} cy
 * @param {number} dx
 * @param {number} dy
 * @returns {[number, number]}
 */
function exitPoint(cx, cy, dx, dy) {
  const hw = NODE_W / 2 + 2;
  const hh = NODE_H / 2 + 2;
  if (dx === 0 && dy === 0) return [cx, cy];
  const scale = Math.min(dx === 0 ? Infinity : hw / Math.abs(dx), dy === 0 ? Infinity : hh / Math.abs(dy));
  return [cx + dx * scale, cy + dy * scale];
}

/**
 * Draws the graph into `svg` (replacing its content) and returns a handle whose `highlight`
 * marks the current state and the states visited before it.
 * @param {SVGSVGElement} svg
 * @param {Graph} graph
 */
export function renderGraph(svg, graph) {
  const layout = layoutGraph(graph);
  svg.replaceChildren();
  svg.setAttribute('viewBox', `0 0 ${layout.width} ${layout.height}`);
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', `state graph of ${graph.id}`);
  const defs = el('defs');
  const marker = el('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' });
  marker.append(el('path', { d: 'M 0 0 L 10 5 L 0 10 z', class: 'arrowhead' }));
  defs.append(marker);
  svg.append(defs);

  const groupLayer = el('g', { class: 'groups' });
  for (const g of layout.groups) {
    const box = el('g', { class: 'group', 'data-state': g.id });
    box.append(el('rect', { x: g.x, y: g.y, width: g.w, height: g.h, rx: 8 }));
    box.append(el('text', { x: g.x + 8, y: g.y + 12 }, g.key));
    groupLayer.append(box);
  }
  svg.append(groupLayer);

  const nodes = new Map(layout.nodes.map((n) => [n.id, n]));
  const edgeLayer = el('g', { class: 'edges' });
  const labelLayer = el('g', { class: 'edge-labels' });
  /** @type {SVGElement[]} */
  const edgeEls = [];
  for (const e of layout.edges) {
    const a = nodes.get(e.source);
    const b = nodes.get(e.target);
    const ax = a.x + NODE_W / 2;
    const ay = a.y + NODE_H / 2;
    const bx = b.x + NODE_W / 2;
    const by = b.y + NODE_H / 2;
    const toFinal = b.type === 'final';
    const back = !toFinal && layout.depth.get(e.target) <= layout.depth.get(e.source);
    let d;
    let lx;
    let ly;
    if (back) {
      // Back edges (e.g. acting -> llmCalling) arc over the flow so they do not hide forward ones.
      const lift = Math.min(ARC_ROOM + GROUP_PAD, 30 + Math.abs(ax - bx) * 0.15);
      const top = Math.min(a.y, b.y);
      d = `M ${ax} ${top} C ${ax} ${top - lift}, ${bx} ${top - lift}, ${bx} ${top - 1}`;
      lx = (ax + bx) / 2;
      ly = top - lift * 0.75;
    } else {
      const [sx, sy] = exitPoint(ax, ay, bx - ax, by - ay);
      const [tx, ty] = exitPoint(bx, by, ax - bx, ay - by);
      d = `M ${sx} ${sy} L ${tx} ${ty}`;
      lx = (sx + tx) / 2;
      ly = (sy + ty) / 2 - 4;
    }
    const path = el('path', { d, class: `edge${toFinal ? ' to-final' : ''}${back ? ' back' : ''}`, 'marker-end': 'url(#arrow)', 'data-source': e.source, 'data-target': e.target });
    path.append(el('title', {}, `${e.source} → ${e.target}: ${e.details.join(', ')}`));
    edgeLayer.append(path);
    edgeEls.push(path);
    if (!toFinal) {
      const label = e.labels.length > 2 ? `${e.labels.slice(0, 2).join(', ')}, …` : e.labels.join(', ');
      labelLayer.append(el('text', { x: lx, y: ly, class: 'edge-label', 'text-anchor': 'middle' }, label));
    }
  }
  svg.append(edgeLayer, labelLayer);

  const nodeEls = new Map();
  const nodeLayer = el('g', { class: 'nodes' });
  for (const n of layout.nodes) {
    const g = el('g', { class: `node node-${n.type}`, 'data-state': n.id, transform: `translate(${n.x} ${n.y})` });
    g.append(el('rect', { width: NODE_W, height: NODE_H, rx: n.type === 'final' ? 17 : 6 }));
    g.append(el('text', { x: NODE_W / 2, y: NODE_H / 2 + 4, 'text-anchor': 'middle' }, n.key));
    const tip = [n.id, n.invokes?.length ? `invokes: ${n.invokes.join(', ')}` : '', n.description ?? ''].filter(Boolean).join('\n');
    g.append(el('title', {}, tip));
    nodeLayer.append(g);
    nodeEls.set(n.id, g);
  }
  svg.append(nodeLayer);
  if (layout.global.length > 0) {
    const byTarget = new Map();
    for (const g of layout.global) byTarget.set(g.target, [...(byTarget.get(g.target) ?? []), g.label]);
    const text = `from any state: ${[...byTarget].map(([t, ls]) => `${ls.join('/')} → ${nodes.get(t)?.key ?? t}`).join(' · ')}`;
    svg.append(el('text', { x: PAD, y: layout.height - 8, class: 'global-note' }, text));
  }

  // Events name states by their own key (`llmCalling`), the graph by path (`running.llmCalling`).
  const resolveId = (/** @type {string} */ name) => {
    if (nodeEls.has(name)) return name;
    for (const n of layout.nodes) if (n.key === name) return n.id;
    return name;
  };

  return {
    /**
     * @param {string|null} current the rollout's state (a top-level key or a dotted id)
     * @param {Iterable<string>} visited states entered before
     * @param {Array<[string,string]>} taken transitions taken, as [from, to]
     */
    highlight(current, visited = [], taken = []) {
      const seen = new Set([...visited].map(resolveId));
      const cur = current === null ? null : resolveId(current);
      for (const [id, g] of nodeEls) {
        g.classList.toggle('current', id === cur);
        g.classList.toggle('visited', id !== cur && seen.has(id));
      }
      const takenSet = new Set(taken.map(([a, b]) => `${resolveId(a)}->${resolveId(b)}`));
      for (const p of edgeEls) p.classList.toggle('taken', takenSet.has(`${p.dataset.source}->${p.dataset.target}`));
    },
  };
}
