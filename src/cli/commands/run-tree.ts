import { ValidationError } from '../../errors.js';
import { branchPoints, type RolloutTree, type TreeNode, type TreeOptions } from '../../runtime/rollout-tree.js';

/** `--tree RxW@T[,T…]`: R roots per task, W branches at each turn boundary T (#26). */
export interface TreeFlag {
  roots: number;
  tree: TreeOptions;
}

/**
 * Parses `--tree RxW@T[,T…]` (e.g. `2x4@3`: 2 roots per task, 4 branches at turn 3;
 * `1x2@1,3`: 2 branches at turn 1, and 2 again at turn 3 of each branch). A turn T is a turn
 * boundary: T assistant turns sampled. Throws ValidationError naming `tree`.
 */
export function parseTreeFlag(v: string): TreeFlag {
  const m = /^(\d+)x(\d+)@(\d+(?:,\d+)*)$/.exec(v.trim());
  const bad = (why: string) => new ValidationError(`--tree must be RxW@T[,T…] (R roots per task, W branches at each turn T, e.g. 2x4@3): ${why}, got '${v}'`, [{ path: 'tree', message: why }]);
  if (!m) throw bad('not of the form RxW@T[,T…]');
  const roots = Number(m[1]);
  const width = Number(m[2]);
  const turns = m[3]!.split(',').map(Number);
  if (roots < 1) throw bad('R must be at least 1');
  if (width < 1) throw bad('W must be at least 1');
  if (!turns.every((t, i) => i === 0 || t > turns[i - 1]!)) throw bad('the turns must be strictly increasing');
  return { roots, tree: { branchTurns: turns, width } };
}

const fmt = (r: number | null): string => (r === null ? '–' : Number.isInteger(r) ? String(r) : r.toFixed(2));

/**
 * The tree summary `rollout run --tree` prints: per task, each tree drawn with every node's
 * outcome and reward, and per branch point the mean and spread (population std) of its
 * children's rewards.
 */
export function formatTrees(trees: readonly { task: string; tree: RolloutTree }[]): string {
  const out: string[] = ['', 'trees:'];
  for (const { task, tree } of trees) {
    out.push(`  task ${task} (${tree.nodes.length} rollouts)`);
    const byId = new Map(tree.nodes.map((n) => [n.id, n]));
    const draw = (n: TreeNode, indent: string): void => {
      const at = n.branchTurn === null ? 'root' : `@${n.branchTurn}`;
      out.push(`${indent}${at} ${n.id.slice(0, 8)} ${n.outcome}${n.finish === 'forked' ? ' (forked)' : ''} reward ${fmt(n.reward)} turns ${n.turns}`);
      for (const c of n.children) draw(byId.get(c)!, `${indent}  `);
    };
    for (const r of tree.roots) draw(byId.get(r)!, '    ');
    for (const p of branchPoints(tree.nodes)) {
      out.push(`    branch point ${p.parentId.slice(0, 8)}@${p.turn}: ${p.children.length} children, mean ${fmt(p.mean)} ± ${fmt(p.std)} (rewards ${p.rewards.map(fmt).join(' ')})`);
    }
  }
  return `${out.join('\n')}\n`;
}
