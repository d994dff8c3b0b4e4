import { afterEach, describe, expect, it } from 'vitest';
import { createRuntime, type EmbeddedRuntime } from '../../../src/index.js';
import { createTestHandler, MemorySandboxProvider, TestCodec } from '../../../src/testing/index.js';
import { ValidationError } from '../../../src/errors.js';
import { branchPoints } from '../../../src/runtime/rollout-tree.js';
import { materializeTrajectory } from '../../../src/runtime/trajectory-prefix.js';
import { bash, finish, tokenFault, TreeOracle } from './runtime-helpers.js';

let rt: EmbeddedRuntime | null = null;
let sandboxes: MemorySandboxProvider;
let llm: TreeOracle;

function start(): EmbeddedRuntime {
  const codec = new TestCodec();
  llm = new TreeOracle(codec);
  sandboxes = new MemorySandboxProvider();
  rt = createRuntime({ handlers: [createTestHandler()], codec, llm, sandboxes });
  return rt;
}

afterEach(async () => {
  await rt?.close();
  rt = null;
  expect(sandboxes.live).toBe(0);
});

const script = [bash('echo a > a.txt'), bash('echo b > b.txt'), bash('echo c > c.txt'), finish];

describe('tree groups', () => {
  it('grows width branches at each listed turn and returns the tree with per-branch-point rewards', async () => {
    const rt = start();
    // Branch 0.1.1 and its children write the expected file wrong: their reward is 0.
    const g = rt.submitGroup({ data_source: 'scripted', oracle: script, expect: { path: 'c.txt', content: 'c\n' } }, {}, 2, { tree: { branchTurns: [1, 2], width: 2 } });
    for (const i of [0, 1]) for (const k of [0, 1]) llm.scripts.set(`${i}.1.1.2.${k}`, [...script.slice(0, 2), bash('echo x > c.txt'), finish]);
    const tree = await g.tree!;
    const results = await g.results;
    // 2 roots + 4 + 8.
    expect(results).toHaveLength(14);
    expect(tree.roots).toEqual(g.rollouts.map((r) => r.id));
    expect(tree.nodes).toHaveLength(14);
    const byId = new Map(tree.nodes.map((n) => [n.id, n]));
    for (const root of tree.roots) {
      const r = byId.get(root)!;
      // A node that forks stops there: its children are its continuations.
      expect([r.outcome, r.finish, r.reward, r.turns, r.children.length]).toEqual(['truncated', 'forked', null, 1, 2]);
      for (const c of r.children) {
        const n = byId.get(c)!;
        expect([n.parentId, n.branchTurn, n.turns, n.children.length]).toEqual([root, 1, 2, 2]);
        for (const leaf of n.children.map((x) => byId.get(x)!)) {
          expect([leaf.parentId, leaf.branchTurn, leaf.outcome, leaf.turns, leaf.children]).toEqual([c, 2, 'completed', 4, []]);
        }
      }
    }
    const points = branchPoints(tree.nodes);
    expect(points).toHaveLength(6);
    const second = points.filter((p) => p.turn === 2);
    expect(second.map((p) => p.mean).sort()).toEqual([0, 0, 1, 1]);
    expect(points.filter((p) => p.turn === 1).map((p) => p.rewards)).toEqual([[null, null], [null, null]]);
    // Every leaf materializes, through two nested prefixes, into a token-exact trajectory of 4 turns.
    const lookup = (id: string) => tree.prefixes[id];
    const leaves = results.filter((r) => r.branchTurn === 2);
    for (const l of leaves) {
      const full = materializeTrajectory(l.trajectory, lookup);
      expect(tokenFault(full)).toBeNull();
      expect(full.turns).toHaveLength(4);
    }
    // Siblings share their prefix object, and their tokens up to the branch point.
    const sib = leaves.filter((l) => l.parentId === leaves[0]!.parentId).map((l) => materializeTrajectory(l.trajectory, lookup));
    const n = leaves[0]!.trajectory.prefix!.tokens;
    expect(sib[0]!.tokens.slice(0, n)).toEqual(sib[1]!.tokens.slice(0, n));
    // Each stored prefix holds only its own part: the level-2 ones reference the level-1 ones.
    expect(Object.keys(tree.prefixes)).toHaveLength(6);
    expect(Object.values(tree.prefixes).filter((p) => p.prefix)).toHaveLength(4);
  });

  it('cancel of a tree ends every node, branches included, and leaves no sandbox', async () => {
    const rt = start();
    llm.hold('0.1.0', 1);
    llm.hold('0.1.1', 1);
    const g = rt.submitGroup({ data_source: 'scripted', oracle: script }, {}, 1, { tree: { branchTurns: [1], width: 2 } });
    await expect.poll(() => llm.waiting.size).toBe(2);
    await g.cancel('stop the tree');
    const results = await g.results;
    expect(results.map((r) => [r.trajectoryId, r.outcome])).toEqual([
      ['0', 'truncated'],
      ['0.1.0', 'cancelled'],
      ['0.1.1', 'cancelled'],
    ]);
    expect(rt.list().filter((s) => !s.result)).toEqual([]);
  });

  it('refuses bad tree options naming the field', () => {
    const rt = start();
    const bad = [
      [{ branchTurns: [], width: 2 }, 'tree.branchTurns'],
      [{ branchTurns: [2, 1], width: 2 }, 'tree.branchTurns'],
      [{ branchTurns: [1], width: 0 }, 'tree.width'],
      [{ branchTurns: [1, 2, 3, 4, 5, 6, 7, 8, 9], width: 10 }, 'tree.width'],
    ] as const;
    for (const [tree, path] of bad) {
      const e = (() => {
        try {
          rt.submitGroup({ data_source: 'scripted' }, {}, 2, { tree: tree as never });
        } catch (x) {
          return x;
        }
      })();
      expect(e).toBeInstanceOf(ValidationError);
      expect((e as ValidationError).issues[0]!.path).toBe(path);
    }
    expect(rt.list()).toEqual([]);
  });
});
