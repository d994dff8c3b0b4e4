import { ValidationError } from '../errors.js';
import type { FinishReason, Outcome, RolloutResult, Trajectory } from '../protocol/trajectory.js';

/**
 * A tree group's shape (#26): each root forks `width` branches at the first turn of
 * `branchTurns`, each branch forks `width` again at the next one, and so on. A turn is a turn
 * boundary: the number of assistant turns sampled before it (see docs/core.md, "Tree rollouts").
 */
export interface TreeOptions {
  /** Strictly increasing turn boundaries, each ≥ 0. */
  branchTurns: readonly number[];
  /** Branches per branch point, ≥ 1. */
  width: number;
}

/** Most nodes one tree group may grow (all roots, all levels): past it the group is refused. */
export const MAX_TREE_NODES = 100_000;

/**
 * Validates tree options and returns them frozen with the group's node count (`roots` roots).
 * @throws ValidationError naming `tree.branchTurns` or `tree.width`.
 */
export function parseTreeOptions(tree: unknown, roots: number): { tree: TreeOptions; nodes: number } {
  const t = (tree ?? {}) as Partial<TreeOptions>;
  const turns = t.branchTurns;
  if (!Array.isArray(turns) || turns.length === 0 || !turns.every((k, i) => Number.isInteger(k) && k >= 0 && (i === 0 || k > turns[i - 1]!))) {
    throw new ValidationError('tree.branchTurns must be a non-empty list of strictly increasing turn numbers ≥ 0', [{ path: 'tree.branchTurns', message: 'expected strictly increasing integers ≥ 0' }]);
  }
  const w = t.width;
  if (!Number.isInteger(w) || (w as number) < 1) throw new ValidationError('tree.width must be a positive integer', [{ path: 'tree.width', message: 'must be a positive integer' }]);
  let level = roots;
  let nodes = roots;
  for (let i = 0; i < turns.length && nodes <= MAX_TREE_NODES; i++) nodes += level *= w as number;
  if (nodes > MAX_TREE_NODES) {
    throw new ValidationError(`the tree would grow ${nodes > MAX_TREE_NODES * 10 ? 'more than ' + MAX_TREE_NODES * 10 : nodes} rollouts; at most ${MAX_TREE_NODES}`, [{ path: 'tree.width', message: `roots × (1 + w + w² …) must be at most ${MAX_TREE_NODES}` }]);
  }
  return { tree: Object.freeze({ branchTurns: Object.freeze([...turns]), width: w as number }), nodes };
}

/** One rollout of a tree. */
export interface TreeNode {
  id: string;
  /** The rollout it was forked from; null for a root. */
  parentId: string | null;
  /** The turn boundary it was forked at; null for a root. */
  branchTurn: number | null;
  /** Assistant turns of its whole trajectory (the shared prefix's included). */
  turns: number;
  reward: number | null;
  outcome: Outcome;
  finish: FinishReason | null;
  /** Its branches, in the order they were forked. */
  children: string[];
}

/** A branch point: the children one node forked at one turn, and their rewards. */
export interface BranchPoint {
  parentId: string;
  turn: number;
  children: string[];
  /** The children's rewards (null for an ungraded child). */
  rewards: (number | null)[];
  /** Mean and population standard deviation of the graded children's rewards; null when none is graded. */
  mean: number | null;
  std: number | null;
}

/** The result of a tree group: its nodes, roots first, and every shared prefix they reference. */
export interface RolloutTree {
  groupId: string;
  roots: string[];
  nodes: TreeNode[];
  /** Stored prefixes by id (each its own part, nested ones referencing their base): enough to materialize every node. */
  prefixes: Record<string, Trajectory>;
}

/** The assistant turns of a result's whole trajectory, shared prefix included. */
export function totalTurns(r: RolloutResult): number {
  return (r.trajectory.prefix?.turns ?? 0) + r.trajectory.turns.length;
}

/** Builds the nodes of a tree from its results (any order; a parent absent from `results` makes its child a root). Pure. */
export function treeNodes(results: readonly RolloutResult[]): { roots: string[]; nodes: TreeNode[] } {
  const byId = new Map<string, TreeNode>();
  for (const r of results) {
    byId.set(r.id, { id: r.id, parentId: r.parentId ?? null, branchTurn: r.branchTurn ?? null, turns: totalTurns(r), reward: r.reward, outcome: r.outcome, finish: r.finish, children: [] });
  }
  const roots: string[] = [];
  for (const n of byId.values()) {
    const p = n.parentId === null ? undefined : byId.get(n.parentId);
    if (p) p.children.push(n.id);
    else roots.push(n.id);
  }
  // Roots first, then each level in order: a trainer can walk the list top-down.
  const nodes: TreeNode[] = [];
  const queue = [...roots];
  for (let i = 0; i < queue.length; i++) {
    const n = byId.get(queue[i]!)!;
    nodes.push(n);
    queue.push(...n.children);
  }
  return { roots, nodes };
}

/** The branch points of a tree's nodes, top-down, with their children's reward statistics. Pure. */
export function branchPoints(nodes: readonly TreeNode[]): BranchPoint[] {
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const out: BranchPoint[] = [];
  for (const n of nodes) {
    const at = new Map<number, string[]>();
    for (const c of n.children) {
      const t = byId.get(c)?.branchTurn ?? 0;
      at.set(t, [...(at.get(t) ?? []), c]);
    }
    for (const [turn, children] of [...at].sort((a, b) => a[0] - b[0])) {
      const rewards = children.map((c) => byId.get(c)?.reward ?? null);
      const graded = rewards.filter((r): r is number => r !== null);
      const mean = graded.length ? graded.reduce((a, b) => a + b, 0) / graded.length : null;
      const std = mean === null ? null : Math.sqrt(graded.reduce((a, b) => a + (b - mean) ** 2, 0) / graded.length);
      out.push({ parentId: n.id, turn, children, rewards, mean, std });
    }
  }
  return out;
}
