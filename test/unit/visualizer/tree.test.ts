import { describe, expect, it } from 'vitest';

// The tree view's model is a plain browser ES module with no DOM: run it here.
interface Point { turn: number; mean: number | null; std: number | null; children: TreeNode[] }
interface TreeNode { record: { id: string }; points: Point[] }
const pageModule = async <T>(name: string): Promise<T> => (await import(/* @vite-ignore */ `../../../visualizer/${name}`)) as T;
const { treeOf } = await pageModule<{ treeOf(m: unknown[]): { roots: TreeNode[]; forked: boolean } }>('tree.js');

describe('visualizer tree view (#26)', () => {
  it('puts siblings side by side under their branch point, with the mean and spread of their rewards', () => {
    const m = [
      { id: 'r', parentId: null, branchTurn: null, reward: null },
      { id: 'a', parentId: 'r', branchTurn: 2, reward: 1 },
      { id: 'b', parentId: 'r', branchTurn: 2, reward: 0 },
      { id: 'c', parentId: 'r', branchTurn: 4, reward: 1 },
      { id: 'a1', parentId: 'a', branchTurn: 3, reward: null },
    ];
    const t = treeOf(m);
    expect(t.forked).toBe(true);
    expect(t.roots.map((n) => n.record.id)).toEqual(['r']);
    const [p2, p4] = t.roots[0]!.points;
    expect([p2!.turn, p2!.children.map((c) => c.record.id), p2!.mean, p2!.std]).toEqual([2, ['a', 'b'], 0.5, 0.5]);
    expect([p4!.turn, p4!.children.map((c) => c.record.id), p4!.mean, p4!.std]).toEqual([4, ['c'], 1, 0]);
    expect(p2!.children[0]!.points[0]).toMatchObject({ turn: 3, mean: null, std: null });
  });

  it('shows no tree for a plain group', () => {
    expect(treeOf([{ id: 'x', parentId: null }, { id: 'y' }]).forked).toBe(false);
  });
});
