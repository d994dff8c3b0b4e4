import { afterEach, describe, expect, it } from 'vitest';
import { createRuntime, type EmbeddedRuntime } from '../../../src/index.js';
import { createTestHandler, MemorySandboxProvider, TestCodec, type MemorySandboxOptions } from '../../../src/testing/index.js';
import { ForkError, QueueFullError, SandboxError, ValidationError } from '../../../src/errors.js';
import { bash, finish, tokenFault, TreeOracle } from './runtime-helpers.js';

/** The rollout's retained events of `type`. */
async function eventsOf(rt: EmbeddedRuntime, type: string, rolloutId?: string): Promise<Record<string, unknown>[]> {
  const ac = new AbortController();
  const it = rt.events({ after: 0, rolloutId, signal: ac.signal })[Symbol.asyncIterator]();
  const out: Record<string, unknown>[] = [];
  for (;;) {
    const r = await Promise.race([it.next(), new Promise<null>((res) => setImmediate(() => res(null)))]);
    if (!r || r.done) break;
    if ((r.value as { type: string }).type === type) out.push(r.value as Record<string, unknown>);
  }
  ac.abort();
  return out;
}

let rt: EmbeddedRuntime | null = null;
let sandboxes: MemorySandboxProvider;
let llm: TreeOracle;

function start(opts: { sandbox?: MemorySandboxOptions; run?: number } = {}): EmbeddedRuntime {
  const codec = new TestCodec();
  llm = new TreeOracle(codec);
  sandboxes = new MemorySandboxProvider(opts.sandbox);
  rt = createRuntime({ handlers: [createTestHandler()], codec, llm, sandboxes, events: { retain: 100_000 }, ...(opts.run ? { stages: { init: 8, run: opts.run, eval: 8 } } : {}) });
  return rt;
}

afterEach(async () => {
  await rt?.close();
  rt = null;
  // Nothing left behind: every sandbox (parents, branches) closed.
  expect(sandboxes.live).toBe(0);
});

/** A parent that sets a variable and writes a file, then is held at its turn-1 call. */
const parentScript = [bash('export X=carried'), bash('echo p > parent.txt'), bash('ls'), finish];

describe('rt.fork', () => {
  it('takes the next turn boundary when asked during an LLM call, and each branch goes on from the parent\'s files, variables and tokens', async () => {
    const rt = start();
    llm.hold('0', 1);
    for (const i of [0, 1]) llm.scripts.set(`0.2.${i}`, [...parentScript.slice(0, 2), bash(`echo b${i} > b${i}.txt`), bash('ls'), bash('echo $X'), finish]);
    const h = rt.submit({ data_source: 'scripted', instance_id: 'fork', trajectory_id: '0', oracle: parentScript });
    await expect.poll(() => llm.waiting.has('0:1')).toBe(true);
    let forked = false;
    const fork = rt.fork(h.id, { n: 2 }).then((f) => ((forked = true), f));
    // The call of turn 1 is in flight: the fork waits for the boundary after it and its action.
    await new Promise((r) => setImmediate(r));
    expect(forked).toBe(false);
    expect(sandboxes.forks).toBe(0);
    llm.open('0', 1);
    const f = await fork;
    expect(f.branchTurn).toBe(2);
    expect(f.rolloutIds).toHaveLength(2);
    const [parent, ...branches] = await Promise.all([h.result, ...f.rollouts.map((b) => b.result)]);
    expect(parent!.outcome).toBe('completed');
    for (const [i, b] of branches.entries()) {
      expect([b!.outcome, b!.parentId, b!.branchTurn, b!.trajectoryId]).toEqual(['completed', h.id, 2, `0.2.${i}`]);
      // Its own part only: 4 turns after the prefix's 2.
      expect(b!.trajectory.prefix).toMatchObject({ id: f.prefixId, turns: 2 });
      expect(b!.trajectory.turns).toHaveLength(4);
    }
    // Each branch saw the parent's file and its own, never its sibling's or the parent's later one.
    const ls = (await eventsOf(rt, 'tool.result')).filter((e) => e.name === 'execute_bash');
    // The first line of each output (the tool adds an exit-code footer).
    const out = (id: string, turn: number) => String(ls.find((e) => e.rolloutId === id && e.turn === turn)?.output).split('\n\n[')[0];
    expect(out(f.rolloutIds[0]!, 3)).toBe('b0.txt\nparent.txt');
    expect(out(f.rolloutIds[1]!, 3)).toBe('b1.txt\nparent.txt');
    expect(out(f.rolloutIds[0]!, 4)).toBe('carried');
    expect(out(h.id, 2)).toBe('parent.txt');
    // Tokens: the prefix is the parent's record at the boundary, identical for both branches.
    const full = branches.map((b) => rt.materialize(b!.trajectory));
    const n = branches[0]!.trajectory.prefix!.tokens;
    expect(full[0]!.tokens.slice(0, n)).toEqual(parent!.trajectory.tokens.slice(0, n));
    expect(full[1]!.tokens.slice(0, n)).toEqual(full[0]!.tokens.slice(0, n));
    expect(full[0]!.tokens.slice(n)).not.toEqual(full[1]!.tokens.slice(n));
    for (const t of full) {
      expect(tokenFault(t)).toBeNull();
      expect(t.turns).toHaveLength(6);
      expect(t.prefix).toBeUndefined();
    }
    // The prefix is stored once: the same object behind both references.
    expect(rt.prefix(f.prefixId)!.tokens).toHaveLength(n);
    const ev = await eventsOf(rt, 'rollout.forked', h.id);
    expect(ev).toMatchObject([{ turn: 2, branches: f.rolloutIds, continued: true, prefixId: f.prefixId }]);
  });

  it('with continueParent false the parent stops at the fork (truncated, finish forked, no reward) and its branches carry on', async () => {
    const rt = start();
    llm.scripts.set('0.1.0', [parentScript[0]!, bash('echo $X'), finish]);
    llm.hold('0', 1);
    const h = rt.submit({ data_source: 'scripted', trajectory_id: '0', oracle: parentScript });
    await expect.poll(() => llm.waiting.has('0:1')).toBe(true);
    llm.open('0', 1);
    // Asked while acting on turn 1 or calling turn 1: either way a boundary ≥ 1.
    const f = await rt.fork(h.id, { n: 1, continueParent: false });
    const [p, b] = await Promise.all([h.result, f.rollouts[0]!.result]);
    expect([p.outcome, p.finish, p.reward]).toEqual(['truncated', 'forked', null]);
    expect(p.trajectory.turns).toHaveLength(f.branchTurn);
    expect(b.outcome).toBe('completed');
    expect(b.reward).toBe(1);
  });

  it('tells a branch what its fork did not carry, in the observation after its first action', async () => {
    const rt = start({ sandbox: { forkLost: ['1 background process (sleep)'] } });
    llm.scripts.set('0.1.0', [parentScript[0]!, bash('true'), finish]);
    llm.hold('0', 1);
    const h = rt.submit({ data_source: 'scripted', trajectory_id: '0', oracle: parentScript });
    await expect.poll(() => llm.waiting.has('0:1')).toBe(true);
    const fork = rt.fork(h.id, { n: 1, continueParent: false });
    llm.open('0', 1);
    const f = await fork;
    expect(f.lost).toEqual(['1 background process (sleep)']);
    const b = await f.rollouts[0]!.result;
    const notes = b.trajectory.messages.filter((m) => m.role === 'user');
    expect(notes.map((m) => m.content)).toEqual([expect.stringContaining('1 background process (sleep)')]);
    await h.result;
  });
});

describe('rt.fork refusals', () => {
  it('refuses an unknown id, an ended rollout, a bad n and a bad atTurn, naming the field', async () => {
    const rt = start();
    await expect(rt.fork('nope', { n: 1 })).rejects.toMatchObject({ name: 'ForkError', code: 'FORK_NOT_FOUND' });
    const done = rt.submit({ data_source: 'scripted', oracle: [finish] });
    await done.result;
    await expect(rt.fork(done.id, { n: 1 })).rejects.toMatchObject({ code: 'FORK_ENDED' });
    llm.hold('0', 1);
    const h = rt.submit({ data_source: 'scripted', trajectory_id: '0', oracle: parentScript });
    await expect.poll(() => llm.waiting.has('0:1')).toBe(true);
    for (const n of [0, -1, 1.5, '2' as unknown as number]) {
      const e = await rt.fork(h.id, { n }).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(ValidationError);
      expect((e as ValidationError).issues[0]!.path).toBe('n');
    }
    // Calling turn 1: the next boundary is 2. Turn 1 has passed, turn 3 is ahead.
    const past = (await rt.fork(h.id, { n: 1, atTurn: 1 }).catch((x: unknown) => x)) as ValidationError;
    expect(past).toBeInstanceOf(ValidationError);
    expect(past.issues[0]).toMatchObject({ path: 'atTurn' });
    expect(past.message).toMatch(/atTurn 1 has passed: .*next turn boundary is 2/);
    const future = (await rt.fork(h.id, { n: 1, atTurn: 3 }).catch((x: unknown) => x)) as ValidationError;
    expect(future.message).toMatch(/atTurn 3 is in the future: .*next turn boundary is 2/);
    // One fork waits per rollout.
    const first = rt.fork(h.id, { n: 1, atTurn: 2 });
    await expect(rt.fork(h.id, { n: 1 })).rejects.toMatchObject({ code: 'FORK_BUSY' });
    llm.open('0', 1);
    const f = await first;
    await Promise.all([h.result, ...f.rollouts.map((r) => r.result)]);
    expect(sandboxes.forks).toBe(1);
  });

  it('refuses n past the RUN limit at once (429), with nothing frozen', async () => {
    const rt = start({ run: 2 });
    llm.hold('0', 1);
    const h = rt.submit({ data_source: 'scripted', trajectory_id: '0', oracle: parentScript });
    await expect.poll(() => llm.waiting.has('0:1')).toBe(true);
    const e = await rt.fork(h.id, { n: 3 }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(QueueFullError);
    expect((e as Error).message).toMatch(/3 branches is wider than the RUN stage \(limit 2\)/);
    llm.open('0', 1);
    expect((await h.result).outcome).toBe('completed');
    expect(sandboxes.forks).toBe(0);
  });

  it('answers a sandbox that cannot be frozen with a typed infra error and leaves the parent running', async () => {
    const rt = start({ sandbox: { canFreeze: false } });
    llm.hold('0', 1);
    const h = rt.submit({ data_source: 'scripted', trajectory_id: '0', oracle: parentScript });
    await expect.poll(() => llm.waiting.has('0:1')).toBe(true);
    const fork = rt.fork(h.id, { n: 2 }).catch((x: unknown) => x);
    llm.open('0', 1);
    const e = await fork;
    expect(e).toBeInstanceOf(SandboxError);
    expect((e as SandboxError).code).toBe('FREEZE_UNAVAILABLE');
    const r = await h.result;
    expect([r.outcome, r.reward, r.trajectory.turns.length]).toEqual(['completed', 1, 4]);
    expect(rt.list().filter((s) => s.parentId)).toEqual([]);
  });

  it('refuses a harness rollout (its agent process cannot be forked) with FORK_UNSUPPORTED, 409', async () => {
    const codec = new TestCodec();
    llm = new TreeOracle(codec);
    sandboxes = new MemorySandboxProvider();
    rt = createRuntime({ builtinHandlers: false, handlers: [createTestHandler({ name: 'harness', aliases: [] })], codec, llm, sandboxes });
    llm.hold('0', 0);
    const h = rt.submit({ data_source: 'harness', trajectory_id: '0', oracle: [finish] });
    await expect.poll(() => llm.waiting.has('0:0')).toBe(true);
    const e = (await rt.fork(h.id, { n: 1 }).catch((x: unknown) => x)) as ForkError;
    expect([e.name, e.code]).toEqual(['ForkError', 'FORK_UNSUPPORTED']);
    expect(e.message).toMatch(/external agent \(a harness\): its agent process cannot be forked/);
    llm.open('0', 0);
    expect((await h.result).outcome).toBe('completed');
  });

  it('refuses a fork still waiting when its rollout stops before the boundary', async () => {
    const rt = start();
    llm.hold('0', 0);
    const h = rt.submit({ data_source: 'scripted', trajectory_id: '0', oracle: [finish] });
    await expect.poll(() => llm.waiting.has('0:0')).toBe(true);
    const fork = rt.fork(h.id, { n: 1 }).catch((x: unknown) => x);
    llm.open('0', 0);
    const e = await fork;
    expect(e).toBeInstanceOf(ForkError);
    expect((e as ForkError).code).toBe('FORK_ENDED');
    expect((await h.result).outcome).toBe('completed');
  });
});
