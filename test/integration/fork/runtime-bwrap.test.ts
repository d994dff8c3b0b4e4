import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRuntime, type EmbeddedRuntime } from '../../../src/index.js';
import { createSandboxProvider, type HostSandboxProvider } from '../../../src/sandbox/index.js';
import { createTestHandler, TestCodec } from '../../../src/testing/index.js';
import { forkSkip } from './fork-kit.js';
import { sandboxEntries, stateEntries as leftOver } from './pool-dirs.js';
import { bash, finish, tokenFault, TreeOracle } from './runtime-helpers.js';

/**
 * Tree rollouts (#26) end to end on the real host provider (bwrap, cgroup freezer): the runtime
 * forks a live rollout's sandbox and token record at a turn boundary.
 */
const ok = forkSkip('the runtime fork tests on bwrap') === null;

let stateDir: string;
let provider: HostSandboxProvider;
let rt: EmbeddedRuntime | null = null;
let llm: TreeOracle;

beforeAll(() => {
  if (!ok) return;
  stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'rt-fork-'));
  provider = createSandboxProvider({ driver: 'bwrap', hosts: 1, stateDir, timeouts: { bashMs: 20_000, noOutputMs: 20_000, pythonMs: 20_000 } });
});
afterAll(async () => {
  await provider?.close();
  // The provider's close ends the host's parked fork branches too.
  if (stateDir) expect(sandboxEntries(stateDir)).toEqual([]);
  if (stateDir) fs.rmSync(stateDir, { recursive: true, force: true });
});
afterEach(async () => {
  await rt?.close();
  rt = null;
  // Every sandbox and snapshot is gone with its last branch.
  if (ok) await expect.poll(stateEntries).toEqual([]);
});

/** Entries of the state dir's sandboxes directory, but the host's parked fork branches (fork-pool.ts). */
const stateEntries = (): string[] => leftOver(stateDir);

function start(): EmbeddedRuntime {
  const codec = new TestCodec();
  llm = new TreeOracle(codec);
  rt = createRuntime({ handlers: [createTestHandler()], codec, llm, sandboxes: provider, events: { retain: 100_000 } });
  return rt;
}

async function outputs(rt: EmbeddedRuntime): Promise<{ rolloutId: string; turn: number; output: string }[]> {
  const ac = new AbortController();
  const it = rt.events({ after: 0, signal: ac.signal })[Symbol.asyncIterator]();
  const out: { rolloutId: string; turn: number; output: string }[] = [];
  for (;;) {
    const r = await Promise.race([it.next(), new Promise<null>((res) => setImmediate(() => res(null)))]);
    if (!r || r.done) break;
    const e = r.value as { type: string; rolloutId: string; turn: number; output: string };
    if (e.type === 'tool.result') out.push({ rolloutId: e.rolloutId, turn: e.turn, output: e.output.split('\n\n[')[0]!.trim() });
  }
  ac.abort();
  return out;
}

const parentScript = [bash('mkdir -p d && cd d && V=kept && f() { echo "fn-$1"; }'), bash('echo p > p.txt'), bash('ls -1'), finish];

describe.skipIf(!ok)('rt.fork on bwrap sandboxes', () => {
  it('waits for the boundary after an LLM call, then branches diverge with the shell state and the exact shared prefix', async () => {
    const rt = start();
    llm.hold('0', 1);
    for (const i of [0, 1]) llm.scripts.set(`0.2.${i}`, [...parentScript.slice(0, 2), bash(`echo b${i} > b${i}.txt; pwd; echo $V; f x`), bash('ls -1'), finish]);
    const h = rt.submit({ data_source: 'scripted', trajectory_id: '0', oracle: parentScript });
    await expect.poll(() => llm.waiting.has('0:1'), { timeout: 30_000 }).toBe(true);
    let forked = false;
    const fork = rt.fork(h.id, { n: 2 }).then((f) => ((forked = true), f));
    const before = stateEntries().length;
    // One turn of the event loop, not synchronisation: a fork that ignored the held call would
    // still be pending; the boundary it waited for is asserted by branchTurn below.
    await new Promise((r) => setTimeout(r, 0));
    expect(forked).toBe(false);
    llm.open('0', 1);
    const f = await fork;
    expect(f.branchTurn).toBe(2);
    expect(stateEntries().length).toBeGreaterThan(before);
    const [parent, ...branches] = await Promise.all([h.result, ...f.rollouts.map((b) => b.result)]);
    expect([parent!.outcome, ...branches.map((b) => b!.outcome)]).toEqual(['completed', 'completed', 'completed']);
    // Every rollout has ended: the snapshot went with the last branch (before the runtime closes).
    await expect.poll(stateEntries).toEqual([]);
    const out = await outputs(rt);
    const at = (id: string, turn: number) => out.find((o) => o.rolloutId === id && o.turn === turn)?.output;
    for (const [i, id] of f.rolloutIds.entries()) {
      expect(at(id, 2)).toBe('/workspace/d\nkept\nfn-x');
      expect(at(id, 3)).toBe(`b${i}.txt\np.txt`);
    }
    // The parent goes on in its own files: no branch's file.
    expect(at(h.id, 2)).toBe('p.txt');
    const full = branches.map((b) => rt.materialize(b!.trajectory));
    const n = branches[0]!.trajectory.prefix!.tokens;
    expect(full[0]!.tokens.slice(0, n)).toEqual(parent!.trajectory.tokens.slice(0, n));
    expect(full[1]!.tokens.slice(0, n)).toEqual(full[0]!.tokens.slice(0, n));
    for (const t of full) expect(tokenFault(t)).toBeNull();
    // Ended: no more forks.
    await expect(rt.fork(h.id, { n: 1 })).rejects.toMatchObject({ code: 'FORK_ENDED' });
  }, 60_000);

  it('grows a two-level tree: every grand-branch sees the files of both levels above it and keeps an exact token record', async () => {
    const rt = start();
    const script = [bash('echo r > r.txt'), bash('echo "$(ls | wc -l)" > level1.txt'), bash('cat level1.txt; ls -1'), { tool_calls: [{ name: 'finish', arguments: { message: 'ok' } }] }];
    const g = rt.submitGroup({ data_source: 'scripted', oracle: script, expect: { path: 'r.txt', content: 'r\n' } }, {}, 1, { tree: { branchTurns: [1, 2], width: 2 } });
    const tree = await g.tree!;
    expect(tree.nodes.map((n) => [n.branchTurn, n.outcome])).toEqual([
      [null, 'truncated'],
      [1, 'truncated'],
      [1, 'truncated'],
      [2, 'completed'],
      [2, 'completed'],
      [2, 'completed'],
      [2, 'completed'],
    ]);
    expect(tree.nodes.filter((n) => n.branchTurn === 2).map((n) => n.reward)).toEqual([1, 1, 1, 1]);
    const out = await outputs(rt);
    for (const leaf of tree.nodes.filter((n) => n.branchTurn === 2)) expect(out.find((o) => o.rolloutId === leaf.id && o.turn === 2)?.output).toBe('1\nlevel1.txt\nr.txt');
    for (const r of await g.results) if (r.parentId) expect(tokenFault(rt.materialize(r.trajectory))).toBeNull();
  }, 90_000);

  it('cancel of a tree ends every branch and removes every sandbox and snapshot', async () => {
    const rt = start();
    llm.hold('0.1.0', 1);
    llm.hold('0.1.1', 1);
    const g = rt.submitGroup({ data_source: 'scripted', oracle: [bash('echo a > a.txt'), bash('sleep 30'), finish] }, {}, 1, { tree: { branchTurns: [1], width: 2 } });
    await expect.poll(() => llm.waiting.size, { timeout: 30_000 }).toBe(2);
    await g.cancel('stop the tree');
    const results = await g.results;
    expect(results.map((r) => r.outcome)).toEqual(['truncated', 'cancelled', 'cancelled']);
  }, 60_000);
});
