import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { createRuntime, type EmbeddedRuntime } from '../../../src/index.js';
import type { BackendInfo, GenerateRequest, GenerateResult, ManagedLlmClient } from '../../../src/llm/llm-client.js';
import { compareVersions } from '../../../src/llm/weight-versions.js';
import type { RolloutResult } from '../../../src/protocol/trajectory.js';
import { createTestHandler, ManualClock, MemorySandboxProvider, ScriptedPolicy, TestCodec, type ScriptedPolicyOptions } from '../../../src/testing/index.js';
import { task } from './helpers.js';

/**
 * The scripted policy as a one-backend managed client: its weight version is what the runtime
 * reads (`listBackends`) and what it stamps on the turns it answers (the version when the answer
 * is sampled, as SGLang's `meta_info.weight_version` reports it).
 */
class VersionedPolicy extends ScriptedPolicy implements ManagedLlmClient {
  version: string | number | null;
  /** What the runtime's trainer version was at each rollout's first call, with the version it got. */
  readonly firstCalls: { rolloutId: string; backend: string | number | null }[] = [];
  /** Versions to report instead of the real one, by call number (a stale replica). */
  lie: Map<number, string | number> = new Map();

  constructor(opts: ScriptedPolicyOptions & { weightVersion: string | number | null }) {
    super(opts);
    this.version = opts.weightVersion;
  }

  override async generate(req: GenerateRequest): Promise<GenerateResult> {
    if (req.turn === 0) this.firstCalls.push({ rolloutId: req.rolloutId, backend: this.version });
    const n = this.calls + 1;
    const r = await super.generate(req);
    const fake = this.lie.get(n);
    return fake === undefined ? r : { ...r, weightVersion: fake };
  }

  override setWeightVersion(v: string | number): void {
    this.version = v;
    super.setWeightVersion(v);
  }

  addBackend(): BackendInfo {
    throw new Error('one backend only');
  }
  drainBackend(): boolean {
    return false;
  }
  removeBackend(): boolean {
    return false;
  }
  listBackends(): BackendInfo[] {
    return [{ id: 'scripted', url: 'test://scripted', protocol: 'prorl', state: 'healthy', inFlight: this.inFlight, served: this.calls, failures: 0, weightVersion: this.version, latencyMs: null }];
  }
}

interface AsyncRig {
  rt: EmbeddedRuntime;
  clock: ManualClock;
  sandboxes: MemorySandboxProvider;
  llm: VersionedPolicy;
}

let r: AsyncRig | undefined;
afterEach(async () => {
  await r?.rt.close();
  r = undefined;
});

function asyncRig(o: { version?: string | number | null; latencyMs?: ScriptedPolicyOptions['latencyMs']; budgetMs?: number; maxStaleness?: number; run?: number; staleTokens?: { maxAge: number; action: 'flag' | 'finish' | 'restart' } } = {}): AsyncRig {
  const clock = new ManualClock();
  const codec = new TestCodec();
  const sandboxes = new MemorySandboxProvider({ clock });
  const llm = new VersionedPolicy({ codec, clock, latencyMs: o.latencyMs ?? 10, weightVersion: o.version === undefined ? 0 : o.version });
  const rt = createRuntime({
    handlers: [createTestHandler()],
    clock,
    codec,
    llm,
    sandboxes,
    stages: { init: o.run ?? 64, run: o.run ?? 64 },
    ...(o.budgetMs ? { budgetMs: o.budgetMs } : {}),
    ...(o.maxStaleness !== undefined ? { maxStaleness: o.maxStaleness } : {}),
    ...(o.staleTokens ? { staleTokens: o.staleTokens } : {}),
  });
  return (r = { rt, clock, sandboxes, llm });
}

/** Asserts the trajectory's version data agree with its turns and never go back. */
function checkVersions(res: RolloutResult): void {
  const t = res.trajectory;
  const sampled = t.lossMask.filter((m) => m === 1).length;
  expect(t.weightVersions!.reduce((a, x) => a + x.tokens, 0)).toBe(sampled);
  const perTurn = t.turns.flatMap((x) => x.outputIds.map(() => x.weightVersion));
  expect(t.weightVersions!.flatMap((x) => new Array<unknown>(x.tokens).fill(x.version))).toEqual(perTurn);
  for (let i = 1; i < t.turns.length; i++) expect(compareVersions(t.turns[i]!.weightVersion!, t.turns[i - 1]!.weightVersion!)).toBeGreaterThanOrEqual(0);
  expect(t.diagnostics.weightVersionRegressed).toBeUndefined();
}

describe('weight versions on tokens', () => {
  it('tags every sampled token with its version, run-length, with min, max and staleness against the trainer', async () => {
    const { rt, clock, llm } = asyncRig({ version: 1 });
    rt.setTrainerVersion(1);
    const h = rt.submit(task());
    // Turn 0 is answered at t=10; the update lands before turn 1's answer.
    await clock.advance(12);
    rt.setWeightVersion(2);
    rt.setTrainerVersion(3);
    await clock.advance(100);
    const res = await h.result;
    expect(res.outcome).toBe('completed');
    expect(res.trajectory.turns.map((t) => t.weightVersion)).toEqual([1, 2, 2]);
    const n = res.trajectory.turns.map((t) => t.outputIds.length);
    expect(res.trajectory.weightVersions).toEqual([{ version: 1, tokens: n[0] }, { version: 2, tokens: n[1]! + n[2]! }]);
    expect(res.trajectory.minWeightVersion).toBe(1);
    expect(res.trajectory.maxWeightVersion).toBe(2);
    expect(res.trajectory.staleness).toBe(2);
    checkVersions(res);
    expect(llm.calls).toBe(3);
  });

  it('gives null staleness with no trainer version and compares labels as strings', async () => {
    const { rt, clock } = asyncRig({ version: 'a' });
    const h = rt.submit(task());
    await clock.advance(12);
    rt.setWeightVersion('b');
    await clock.advance(100);
    const res = await h.result;
    expect(res.trajectory.minWeightVersion).toBe('a');
    expect(res.trajectory.maxWeightVersion).toBe('b');
    expect(res.trajectory.staleness).toBeNull();
  });

  it('flags a rollout whose backend reports an older version than an earlier turn (the tokens are kept)', async () => {
    const { rt, clock, llm } = asyncRig({ version: 5 });
    llm.lie.set(2, 4);
    const h = rt.submit(task());
    await clock.advance(100);
    const res = await h.result;
    expect(res.outcome).toBe('completed');
    expect(res.trajectory.turns.map((t) => t.weightVersion)).toEqual([5, 4, 5]);
    expect(res.trajectory.diagnostics.weightVersionRegressed).toEqual({ turn: 1, version: 4 });
    expect(res.trajectory.minWeightVersion).toBe(4);
  });

  it('refuses a version that is neither a finite number nor a short string, naming the field', () => {
    const { rt } = asyncRig();
    expect(() => rt.setTrainerVersion(Number.NaN)).toThrow(/trainer version/);
    expect(() => rt.setWeightVersion('')).toThrow(/weight version/);
  });
});

describe('pause and resume of generation', () => {
  it('holds new LLM calls while paused, lets the call in flight finish, and does not count the wait toward the budget', async () => {
    const { rt, clock, llm } = asyncRig({ budgetMs: 1_000 });
    const h = rt.submit(task());
    await clock.advance(5); // turn 0 in flight
    rt.pauseGeneration();
    expect(rt.generationPaused).toBe(true);
    await clock.advance(10_000);
    // Turn 0 was answered and acted on; turn 1 has not been sent.
    expect(llm.calls).toBe(1);
    expect(rt.get(h.id)?.state).toBe('llmCalling');
    rt.setWeightVersion(1);
    rt.resumeGeneration();
    await clock.advance(100);
    const res = await h.result;
    expect(res.outcome).toBe('completed');
    expect(res.trajectory.turns.map((t) => t.weightVersion)).toEqual([0, 1, 1]);
    expect(res.timing.runMs).toBeLessThan(1_000);
    expect(res.timing.wallMs).toBeGreaterThanOrEqual(10_000);
  });

  it('lets a paused rollout be cancelled and forgets its wait', async () => {
    const { rt, clock } = asyncRig();
    rt.pauseGeneration();
    const h = rt.submit(task());
    await clock.advance(5);
    await h.cancel('test');
    expect((await h.result).outcome).toBe('cancelled');
    expect(r!.sandboxes.live).toBe(0);
  });

  it('loses no rollout of a 64-rollout batch when weights are updated in the middle, restarts no sandbox and leaves no turn without a version', async () => {
    let seed = 7;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    const { rt, clock, llm, sandboxes } = asyncRig({ version: 1, latencyMs: () => 1 + Math.floor(rnd() * 50) });
    const hs = Array.from({ length: 64 }, (_, i) => rt.submit(task({ instance_id: `i${i}` })));
    await clock.advance(40);
    const callsBefore = llm.calls;
    rt.pauseGeneration();
    await clock.advance(60); // calls in flight drain
    const inFlight = llm.inFlight;
    rt.setWeightVersion(2);
    rt.resumeGeneration();
    await clock.advance(1_000);
    const results = await Promise.all(hs.map((h) => h.result));
    expect(callsBefore).toBeGreaterThan(0);
    expect(inFlight).toBe(0);
    expect(results.map((x) => x.outcome)).toEqual(new Array(64).fill('completed'));
    for (const x of results) {
      expect(x.attempts).toBe(1);
      expect(x.trajectory.turns.every((t) => t.weightVersion !== null)).toBe(true);
      checkVersions(x);
    }
    const seen = new Set(results.flatMap((x) => x.trajectory.turns.map((t) => t.weightVersion)));
    expect(seen).toEqual(new Set([1, 2]));
    expect(sandboxes.created).toBe(64);
    expect(sandboxes.live).toBe(0);
  });
});

describe('bounded staleness (maxStaleness)', () => {
  it('starts no rollout more than η versions ahead of the trainer, under random latencies and update times', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({ seed: fc.integer({ min: 1, max: 2 ** 30 }), eta: fc.integer({ min: 0, max: 2 }), n: fc.integer({ min: 4, max: 24 }), updates: fc.array(fc.record({ at: fc.integer({ min: 1, max: 400 }), who: fc.constantFrom('backend', 'trainer') }), { maxLength: 12 }) }),
        async ({ seed, eta, n, updates }) => {
          let s = seed;
          const rnd = () => ((s = (s * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
          const { rt, clock, llm } = asyncRig({ version: 0, maxStaleness: eta, latencyMs: () => 1 + Math.floor(rnd() * 60), run: 4 });
          rt.setTrainerVersion(0);
          let backend = 0;
          let trainer = 0;
          const observed: number[] = [];
          const gen = llm.generate.bind(llm);
          llm.generate = (req) => {
            // The would-be version against the trainer's, the moment the rollout's first call goes out.
            if (req.turn === 0) observed.push((llm.version as number) - (rt.trainerVersion as number));
            return gen(req);
          };
          const hs = Array.from({ length: n }, (_, i) => rt.submit(task({ instance_id: `p${i}` })));
          let t = 0;
          for (const u of [...updates].sort((a, b) => a.at - b.at)) {
            await clock.advance(u.at - t);
            t = u.at;
            // The trainer never consumes a version the backends have not reached.
            if (u.who === 'backend') rt.setWeightVersion(++backend);
            else if (trainer < backend) rt.setTrainerVersion(++trainer);
          }
          // The trainer catches up so every held rollout can start.
          rt.setTrainerVersion(backend);
          await clock.advance(5_000);
          const results = await Promise.all(hs.map((h) => h.result));
          expect(results.every((x) => x.outcome === 'completed')).toBe(true);
          expect(observed).toHaveLength(n);
          expect(Math.max(...observed)).toBeLessThanOrEqual(eta);
          await rt.close();
          r = undefined;
        },
      ),
      { numRuns: 25, seed: 13 },
    );
  });

  it('lets rollouts already generating go on when the backends move ahead', async () => {
    const { rt, clock, llm } = asyncRig({ version: 0, maxStaleness: 0 });
    rt.setTrainerVersion(0);
    const a = rt.submit(task({ instance_id: 'a' }));
    await clock.advance(12);
    rt.setWeightVersion(1);
    const b = rt.submit(task({ instance_id: 'b' }));
    await clock.advance(200);
    expect((await a.result).outcome).toBe('completed');
    expect(rt.get(b.id)?.state).toBe('llmCalling');
    expect(llm.firstCalls.map((c) => c.rolloutId)).toEqual([a.id]);
    rt.setTrainerVersion(1);
    await clock.advance(200);
    expect((await b.result).trajectory.minWeightVersion).toBe(1);
  });
});

/**
 * An engine that aborts the first call of the given turns after `k` tokens (a weight update in
 * `abort` mode: it returns the partial output, finish reason `abort`, and moves to `next`), and
 * serves a re-issued call (prompt + partial ids) with the rest of the reply.
 */
class AbortingPolicy extends VersionedPolicy {
  aborts = new Map<number, { k: number; next: number }>();
  /** Called when a call is aborted (a trainer pausing around its update). */
  onAbort: () => void = () => {};
  readonly continuations: GenerateRequest[] = [];
  private readonly given = new Map<string, number>();

  override async generate(req: GenerateRequest): Promise<GenerateResult> {
    const key = `${req.rolloutId}:${req.turn}`;
    const given = this.given.get(key);
    if (given !== undefined) {
      this.continuations.push(req);
      const r = await super.generate({ ...req, maxTokens: req.maxTokens + given });
      return { ...r, outputIds: r.outputIds.slice(given), logprobs: r.logprobs.slice(given) };
    }
    const r = await super.generate(req);
    const a = this.aborts.get(req.turn);
    if (!a) return r;
    this.given.set(key, a.k);
    this.setWeightVersion(a.next);
    this.onAbort();
    return { ...r, outputIds: r.outputIds.slice(0, a.k), logprobs: r.logprobs.slice(0, a.k), finishReason: 'abort' };
  }
}

describe('abort and resume (partial rollouts)', () => {
  async function run(aborts: Map<number, { k: number; next: number }>, pauseOnAbort = false) {
    const clock = new ManualClock();
    const codec = new TestCodec();
    const sandboxes = new MemorySandboxProvider({ clock });
    const llm = new AbortingPolicy({ codec, clock, latencyMs: 10, weightVersion: 0 });
    llm.aborts = aborts;
    const rt = createRuntime({ handlers: [createTestHandler()], clock, codec, llm, sandboxes });
    r = { rt, clock, sandboxes, llm };
    if (pauseOnAbort) llm.onAbort = () => rt.pauseGeneration();
    const h = rt.submit(task());
    await clock.advance(500);
    const heldContinuations = llm.continuations.length;
    const heldState = rt.get(h.id)?.state;
    if (pauseOnAbort) {
      rt.resumeGeneration();
      await clock.advance(500);
    }
    const res = await h.result;
    await rt.close();
    r = undefined;
    return { res, llm, sandboxes, heldContinuations, heldState };
  }

  it('resumes an aborted generation on prompt + partial ids: the turn is the prefix + the continuation, versions per token', async () => {
    const base = await run(new Map());
    const { res, llm, sandboxes } = await run(new Map([[1, { k: 3, next: 1 }]]));
    expect(res.outcome).toBe('completed');
    expect(res.reward).toBe(base.res.reward);
    const full = base.res.trajectory.turns[1]!.outputIds;
    const turn = res.trajectory.turns[1]!;
    expect(turn.outputIds).toEqual(full);
    expect(turn.finishReason).toBe('stop');
    expect(turn.weightVersion).toBe(1);
    expect(res.trajectory.tokens).toEqual(base.res.trajectory.tokens);
    // The continuation was asked for on the turn's prompt + the 3 partial ids, for the tokens left.
    expect(llm.continuations).toHaveLength(1);
    expect(llm.continuations[0]!.promptIds).toEqual([...turn.promptIds, ...full.slice(0, 3)]);
    const n0 = res.trajectory.turns[0]!.outputIds.length;
    const n2 = res.trajectory.turns[2]!.outputIds.length;
    expect(res.trajectory.weightVersions).toEqual([{ version: 0, tokens: n0 + 3 }, { version: 1, tokens: full.length - 3 + n2 }]);
    expect(res.trajectory.weightVersions!.reduce((a, x) => a + x.tokens, 0)).toBe(res.trajectory.lossMask.filter((m) => m === 1).length);
    expect(res.trajectory.diagnostics.weightVersionRegressed).toBeUndefined();
    expect(sandboxes.created).toBe(1);
    expect(llm.calls).toBe(4);
  });

  it('holds the continuation of an aborted generation while generation is paused', async () => {
    const { res, llm, heldContinuations, heldState } = await run(new Map([[0, { k: 2, next: 5 }]]), true);
    expect(heldContinuations).toBe(0);
    expect(heldState).toBe('llmCalling');
    expect(res.outcome).toBe('completed');
    expect(res.trajectory.turns[0]!.weightVersion).toBe(5);
    expect(res.trajectory.weightVersions![0]).toEqual({ version: 0, tokens: 2 });
    expect(llm.continuations).toHaveLength(1);
  });
});

describe('bound on a rollout\'s oldest token (staleTokens)', () => {
  /** Turn 0 is sampled at version 0 (t=10); turn 1's call is out when the backends and the trainer move to 3 (t=12), so turn 2's call is the first checked against 3. */
  async function aged(action: 'flag' | 'finish' | 'restart') {
    const rig = asyncRig({ version: 0, staleTokens: { maxAge: 1, action } });
    rig.rt.setTrainerVersion(0);
    const h = rig.rt.submit(task());
    await rig.clock.advance(12);
    rig.rt.setWeightVersion(3);
    rig.rt.setTrainerVersion(3);
    await rig.clock.advance(5_000);
    return { ...rig, res: await h.result };
  }

  it('flags it and goes on when the trainer chooses flag: the tokens are kept, the first stale turn and age are in the diagnostics', async () => {
    const { res, sandboxes } = await aged('flag');
    expect(res.outcome).toBe('completed');
    expect(res.trajectory.turns.map((t) => t.weightVersion)).toEqual([0, 3, 3]);
    expect(res.trajectory.diagnostics.staleTokens).toEqual({ turn: 2, age: 3 });
    expect(sandboxes.created).toBe(1);
  });

  it('finishes it at once when the trainer chooses finish: truncated with finish stale_tokens, still evaluated, sandbox closed', async () => {
    const { res, llm, sandboxes } = await aged('finish');
    expect(res.outcome).toBe('truncated');
    expect(res.finish).toBe('stale_tokens');
    expect(res.trajectory.turns.map((t) => t.weightVersion)).toEqual([0, 3]);
    expect(res.reward).not.toBeNull();
    expect(llm.calls).toBe(2);
    expect(sandboxes.live).toBe(0);
  });

  it('restarts it from its prompt when the trainer chooses restart: a new attempt whose tokens are all on the new version', async () => {
    const { res, sandboxes } = await aged('restart');
    expect(res.outcome).toBe('completed');
    expect(res.attempts).toBe(2);
    expect(res.trajectory.turns.map((t) => t.weightVersion)).toEqual([3, 3, 3]);
    expect(res.trajectory.diagnostics.staleTokens).toBeUndefined();
    expect(sandboxes.created).toBe(2);
    expect(sandboxes.live).toBe(0);
  });

  it('leaves a rollout within the bound alone', async () => {
    const { rt, clock } = asyncRig({ version: 0, staleTokens: { maxAge: 3, action: 'finish' } });
    rt.setTrainerVersion(0);
    const h = rt.submit(task());
    await clock.advance(12);
    rt.setWeightVersion(3);
    rt.setTrainerVersion(3);
    await clock.advance(500);
    const res = await h.result;
    expect(res.outcome).toBe('completed');
    expect(res.trajectory.diagnostics.staleTokens).toBeUndefined();
  });

  it('refuses a bad bound naming the field', () => {
    expect(() => asyncRig({ staleTokens: { maxAge: -1, action: 'flag' } })).toThrow(/staleTokens\.maxAge/);
    expect(() => asyncRig({ staleTokens: { maxAge: 1, action: 'drop' as never } })).toThrow(/staleTokens\.action/);
  });
});
