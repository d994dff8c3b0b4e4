import { afterEach, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRuntime, type EmbeddedRuntime } from '../../../src/index.js';
import { createSandboxProvider, type HostSandboxProvider } from '../../../src/sandbox/index.js';
import { createTestHandler, TestCodec } from '../../../src/testing/index.js';
import { forkSkip } from './fork-kit.js';
import { parkedAtGate, pooledIds, sandboxEntries, stateEntries } from './pool-dirs.js';
import { bash, finish, TreeOracle } from './runtime-helpers.js';

/**
 * A tree rollout's first fork is warm (#26): once the root's sandbox is made, the runtime asks
 * its host to park `width` branches (rollout-fork.ts `prewarm`), and the fork at the first
 * branch turn takes them. Real bwrap sandboxes on a provider of its own (its pool starts empty).
 */
const ok = forkSkip('the runtime fork prewarm tests') === null;

let stateDir: string;
let provider: HostSandboxProvider | null = null;
let rt: EmbeddedRuntime | null = null;

afterEach(async () => {
  await rt?.close();
  rt = null;
  await provider?.close();
  provider = null;
  if (stateDir) {
    expect(sandboxEntries(stateDir)).toEqual([]);
    fs.rmSync(stateDir, { recursive: true, force: true });
  }
});

function leaseRollout(id: string): string | null {
  try {
    return (JSON.parse(fs.readFileSync(path.join(stateDir, 'sandboxes', id, 'lease.json'), 'utf8')) as { rolloutId: string }).rolloutId;
  } catch {
    return null;
  }
}

/** A runtime on bwrap sandboxes of a provider of its own (its fork pool starts empty), state in a fresh dir. */
function start(prefix: string): { rt: EmbeddedRuntime; llm: TreeOracle } {
  stateDir = fs.mkdtempSync(path.join(os.tmpdir(), `${prefix}-`));
  fs.chmodSync(stateDir, 0o711);
  provider = createSandboxProvider({ driver: 'bwrap', hosts: 1, stateDir, timeouts: { bashMs: 20_000, noOutputMs: 20_000 } });
  const codec = new TestCodec();
  const llm = new TreeOracle(codec);
  rt = createRuntime({ handlers: [createTestHandler()], codec, llm, sandboxes: provider });
  return { rt, llm };
}

describe.skipIf(!ok)('tree rollouts prewarm their first fork', () => {
  it("a tree root's host parks width branches before its first branch turn, and the fork there takes them all", async () => {
    const { rt, llm } = start('rt-prewarm');
    // The root waits before its first call (its sandbox is made by then); its branches before their first.
    llm.hold('0', 0);
    llm.hold('0.1.0', 1);
    llm.hold('0.1.1', 1);
    const g = rt.submitGroup({ data_source: 'scripted', oracle: [bash('export V=root; echo r > r.txt'), bash('echo $V; cat r.txt'), finish] }, {}, 1, { tree: { branchTurns: [1], width: 2 } });
    await expect.poll(() => llm.waiting.has('0:0'), { timeout: 30_000 }).toBe(true);
    // No fork has happened: only the prewarm can have parked these.
    await expect.poll(() => parkedAtGate(stateDir).length, { timeout: 60_000 }).toBe(2);
    const parked = pooledIds(stateDir);
    llm.open('0', 0);
    // The branches run in the parked sandboxes: their leases now name the branch rollouts.
    await expect.poll(() => llm.waiting.size, { timeout: 60_000 }).toBe(2);
    const named = parked.map(leaseRollout);
    expect(named.every((r) => r !== null && r !== 'fork-pool' && r !== g.rollouts[0]!.id)).toBe(true);
    llm.open('0.1.0', 1);
    llm.open('0.1.1', 1);
    const tree = await g.tree!;
    expect(tree.nodes.filter((n) => n.branchTurn === 1).map((n) => n.id).sort()).toEqual([...named].sort());
    expect(tree.nodes.filter((n) => n.branchTurn === 1).map((n) => n.outcome)).toEqual(['completed', 'completed']);
    await expect.poll(() => stateEntries(stateDir)).toEqual([]);
  }, 120_000);

  it("a fork asked for ahead of its boundary (a rollout with no tree plan) takes branches its host parked at the request", async () => {
    const { rt, llm } = start('rt-prewarm-req');
    // The rollout is in its second LLM call when the fork is asked for: the boundary is turn 2.
    llm.hold('r', 1);
    const h = rt.submit({ data_source: 'scripted', trajectory_id: 'r', oracle: [bash('export V=root; echo r > r.txt'), bash('echo $V; cat r.txt'), finish] });
    await expect.poll(() => llm.waiting.has('r:1'), { timeout: 30_000 }).toBe(true);
    expect(pooledIds(stateDir)).toEqual([]);
    const fork = rt.fork(h.id, { n: 2 });
    // No fork has happened (the call is held): only the request's prewarm can have parked these.
    await expect.poll(() => parkedAtGate(stateDir).length, { timeout: 60_000 }).toBe(2);
    const parked = pooledIds(stateDir);
    llm.open('r', 1);
    const f = await fork;
    // The branches run in the parked sandboxes: their leases now name the branch rollouts.
    expect(parked.map(leaseRollout).sort()).toEqual([...f.rolloutIds].sort());
    // The runtime's view of its hosts' pools (what /metrics shows): both branches were hits.
    expect(await rt.forkPoolStats()).toMatchObject({ hits: 2, misses: 0 });
    const results = await Promise.all([h.result, ...f.rollouts.map((b) => b.result)]);
    expect(results.map((r) => r.outcome)).toEqual(['completed', 'completed', 'completed']);
    await expect.poll(() => stateEntries(stateDir)).toEqual([]);
  }, 120_000);

  it('a plain rollout (no tree) parks nothing', async () => {
    const { rt } = start('rt-prewarm-plain');
    const r = await rt.submit({ data_source: 'scripted', oracle: [bash('echo a'), finish] }).result;
    expect(r.outcome).toBe('completed');
    expect(pooledIds(stateDir)).toEqual([]);
  }, 60_000);
});
