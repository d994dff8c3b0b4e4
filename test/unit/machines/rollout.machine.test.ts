import { describe, expect, it } from 'vitest';
import { createActor, fromCallback, fromPromise } from 'xstate';
import { rolloutMachine, type Stage, type StepCommand } from '../../../machines/rollout.machine.js';

/** Deferred promise the test resolves by hand. */
function deferred<T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
}

const tick = () => new Promise<void>((r) => setImmediate(r));

/** The machine with hand-driven actors, recording every action it runs. */
function harness(guards: { initSlotHeld?: () => boolean } = {}) {
  const log: string[] = [];
  /** Every state the machine reported entering (`stateEntered`). */
  const states: string[] = [];
  const pending: Record<string, ReturnType<typeof deferred<unknown>>> = {};
  // Typed `any` output: each stub stands in for actors of different output types.
  const actor = (name: string) =>
    fromPromise<any, { rolloutId: string; turn: number }>(({ input }) => {
      const d = deferred<unknown>();
      pending[name] = d;
      log.push(`${name}(${input.turn})`);
      return d.promise;
    });
  let loopStarts = 0;
  // The RUN stage's loop actor: each STEP is logged as `llm(turn)` / `act(turn)` and answered when the test settles it.
  const runLoop = fromCallback<StepCommand, { rolloutId: string; turn: number }>(({ sendBack, receive }) => {
    loopStarts++;
    receive((cmd) => {
      const d = deferred<unknown>();
      pending[cmd.kind] = d;
      log.push(`${cmd.kind}(${cmd.turn})`);
      d.promise.then(
        (output) => sendBack({ type: cmd.kind === 'llm' ? 'LLM_DONE' : 'ACT_DONE', output }),
        (error: unknown) => sendBack({ type: 'STEP_FAILED', error }),
      );
    });
  });
  const machine = rolloutMachine.provide({
    guards,
    actors: { initRollout: actor('initRollout'), runLoop, evaluate: actor('evaluate') },
    actions: {
      stateEntered: (_, p: { state: string }) => states.push(p.state),
      requestSlot: (_, p: { stage: Stage }) => log.push(`request:${p.stage}`),
      withdrawSlot: (_, p: { stage: Stage }) => log.push(`withdraw:${p.stage}`),
      releaseSlot: (_, p: { stage: Stage }) => log.push(`release:${p.stage}`),
      stageEntered: (_, p: { stage: Stage }) => log.push(`enter:${p.stage}`),
      stageExited: (_, p: { stage: Stage }) => log.push(`exit:${p.stage}`),
      recordError: (_, p: { error: unknown }) => log.push(`error:${(p.error as Error).message}`),
      ended: (_, p: { state: string }) => log.push(`ended:${p.state}`),
    },
  });
  const a = createActor(machine, { input: { rolloutId: 'r1' } });
  a.start();
  const leaf = (): string => {
    const v = a.getSnapshot().value;
    return typeof v === 'string' ? v : `${Object.keys(v)[0]}.${Object.values(v)[0] as string}`;
  };
  const settle = async (name: string, value: unknown) => {
    pending[name]!.resolve(value);
    await tick();
  };
  const fail = async (name: string, err: Error) => {
    pending[name]!.reject(err);
    await tick();
  };
  return { a, log, states, leaf, settle, fail, loopStarts: () => loopStarts };
}

/** Drives a fresh machine to `target` along the happy path. */
async function driveTo(target: string) {
  const h = harness();
  const steps: [string, () => Promise<void> | void][] = [
    ['initializing', () => h.a.send({ type: 'SLOT', stage: 'init' })],
    ['waitingRun', () => h.settle('initRollout', undefined)],
    ['running.llmCalling', () => h.a.send({ type: 'SLOT', stage: 'run' })],
    ['running.acting', () => h.settle('llm', { contextFull: false })],
    ['waitingEval', () => h.settle('act', { stop: true })],
    ['evaluating', () => h.a.send({ type: 'SLOT', stage: 'eval' })],
  ];
  if (target === 'queued') return h;
  for (const [state, step] of steps) {
    await step();
    if (state === target) return h;
  }
  throw new Error(`unknown target ${target}`);
}

describe('rollout machine', () => {
  it('starts in queued and asks for an INIT slot', () => {
    const h = harness();
    expect(h.leaf()).toBe('queued');
    expect(h.log).toEqual(['request:init']);
  });

  it('passes queued without a SLOT when the INIT slot is already held (taken at admission)', () => {
    const h = harness({ initSlotHeld: () => true });
    expect(h.leaf()).toBe('initializing');
    // No SLOT event: the request finds the slot held (the pool ignores it). In the initial
    // macrostep XState starts the invoked actor before it runs the entry actions it deferred to
    // start(), so the init actor comes first here (the supervisor's init step needs neither).
    expect(h.log).toEqual(['initRollout(0)', 'request:init', 'withdraw:init', 'enter:init']);
  });

  it('ignores a slot of another stage while queued', () => {
    const h = harness();
    h.a.send({ type: 'SLOT', stage: 'run' });
    expect(h.leaf()).toBe('queued');
  });

  it('moves queued → initializing on the INIT slot and starts the init actor and the budget clock', () => {
    const h = harness();
    h.a.send({ type: 'SLOT', stage: 'init' });
    expect(h.leaf()).toBe('initializing');
    expect(h.log).toEqual(['request:init', 'withdraw:init', 'enter:init', 'initRollout(0)']);
  });

  it('moves initializing → waitingRun when init resolves, releasing the INIT slot', async () => {
    const h = await driveTo('waitingRun');
    expect(h.leaf()).toBe('waitingRun');
    expect(h.log.slice(-3)).toEqual(['exit:init', 'release:init', 'request:run']);
  });

  it('goes straight from initializing to running when init already took the RUN slot', async () => {
    const h = await driveTo('initializing');
    await h.settle('initRollout', { runSlot: true });
    expect(h.leaf()).toBe('running.llmCalling');
    expect(h.log).not.toContain('request:run');
  });

  it('goes straight from acting to evaluating when the action already took the EVAL slot', async () => {
    const h = await driveTo('running.acting');
    await h.settle('act', { stop: true, evalSlot: true });
    expect(h.leaf()).toBe('evaluating');
    expect(h.log).not.toContain('request:eval');
  });

  it('goes straight from llmCalling to evaluating on a full context when the EVAL slot was taken', async () => {
    const h = await driveTo('running.llmCalling');
    await h.settle('llm', { contextFull: true, evalSlot: true });
    expect(h.leaf()).toBe('evaluating');
  });

  it('moves initializing → failed when init rejects', async () => {
    const h = await driveTo('initializing');
    await h.fail('initRollout', new Error('boom'));
    expect(h.leaf()).toBe('failed');
    expect(h.log.slice(-4)).toEqual(['exit:init', 'release:init', 'error:boom', 'ended:failed']);
  });

  it('moves waitingRun → llmCalling on the RUN slot and holds it across turns', async () => {
    const h = await driveTo('running.llmCalling');
    expect(h.log.slice(-3)).toEqual(['withdraw:run', 'enter:run', 'llm(0)']);
    await h.settle('llm', { contextFull: false });
    await h.settle('act', { stop: false });
    expect(h.leaf()).toBe('running.llmCalling');
    expect(h.log).not.toContain('release:run');
    expect(h.log.slice(-1)).toEqual(['llm(1)']);
  });

  it('runs every turn of the RUN stage on one loop actor', async () => {
    const h = await driveTo('running.llmCalling');
    for (let i = 0; i < 3; i++) {
      await h.settle('llm', { contextFull: false });
      await h.settle('act', { stop: false });
    }
    expect(h.log.filter((l) => /^(llm|act)\(/.test(l))).toEqual(['llm(0)', 'act(0)', 'llm(1)', 'act(1)', 'llm(2)', 'act(2)', 'llm(3)']);
    expect(h.loopStarts()).toBe(1);
  });

  it('drops a step that answers after the machine left running', async () => {
    const h = await driveTo('running.llmCalling');
    h.a.send({ type: 'TIMEOUT', error: new Error('budget') });
    expect(h.leaf()).toBe('timedOut');
    const before = h.log.length;
    await h.settle('llm', { contextFull: false });
    expect(h.leaf()).toBe('timedOut');
    expect(h.a.getSnapshot().context.turn).toBe(0);
    expect(h.log.slice(before)).toEqual([]);
  });

  it('moves llmCalling → acting with the turn counted', async () => {
    const h = await driveTo('running.acting');
    expect(h.a.getSnapshot().context.turn).toBe(1);
    expect(h.log.slice(-1)).toEqual(['act(0)']);
  });

  it('moves llmCalling → waitingEval when the context is full, releasing the RUN slot', async () => {
    const h = await driveTo('running.llmCalling');
    await h.settle('llm', { contextFull: true });
    expect(h.leaf()).toBe('waitingEval');
    expect(h.log.slice(-3)).toEqual(['exit:run', 'release:run', 'request:eval']);
  });

  it('moves llmCalling → failed when the LLM call rejects', async () => {
    const h = await driveTo('running.llmCalling');
    await h.fail('llm', new Error('backend down'));
    expect(h.leaf()).toBe('failed');
    expect(h.log).toContain('release:run');
  });

  it('moves acting → waitingEval when the loop stops', async () => {
    const h = await driveTo('waitingEval');
    expect(h.leaf()).toBe('waitingEval');
  });

  it('moves acting → failed when the action rejects', async () => {
    const h = await driveTo('running.acting');
    await h.fail('act', new Error('sandbox lost'));
    expect(h.leaf()).toBe('failed');
    expect(h.log).toContain('error:sandbox lost');
  });

  it('moves waitingEval → evaluating on the EVAL slot and evaluating → done', async () => {
    const h = await driveTo('evaluating');
    expect(h.log.slice(-3)).toEqual(['withdraw:eval', 'enter:eval', 'evaluate(1)']);
    await h.settle('evaluate', undefined);
    expect(h.leaf()).toBe('done');
    expect(h.log.slice(-3)).toEqual(['exit:eval', 'release:eval', 'ended:done']);
    expect(h.a.getSnapshot().status).toBe('done');
  });

  it('reports every state it enters once, in order, and not the running parent', async () => {
    const h = await driveTo('evaluating');
    await h.settle('evaluate', undefined);
    expect(h.states).toEqual(['queued', 'initializing', 'waitingRun', 'llmCalling', 'acting', 'waitingEval', 'evaluating', 'done']);
  });

  it('reports the final state it is cancelled into, after the state it left', async () => {
    const h = await driveTo('running.acting');
    h.a.send({ type: 'CANCEL' });
    expect(h.states.slice(-2)).toEqual(['acting', 'cancelled']);
  });

  it('moves evaluating → failed when evaluation rejects', async () => {
    const h = await driveTo('evaluating');
    await h.fail('evaluate', new Error('grader crashed'));
    expect(h.leaf()).toBe('failed');
  });

  const releases: Record<string, string[]> = {
    queued: ['withdraw:init'],
    initializing: ['exit:init', 'release:init'],
    waitingRun: ['withdraw:run'],
    'running.llmCalling': ['exit:run', 'release:run'],
    'running.acting': ['exit:run', 'release:run'],
    waitingEval: ['withdraw:eval'],
    evaluating: ['exit:eval', 'release:eval'],
  };
  for (const [state, expected] of Object.entries(releases)) {
    it(`cancels from ${state}, giving back its slot on the way out`, async () => {
      const h = await driveTo(state);
      const before = h.log.length;
      h.a.send({ type: 'CANCEL' });
      expect(h.leaf()).toBe('cancelled');
      expect(h.log.slice(before)).toEqual([...expected, 'ended:cancelled']);
    });
  }

  it('goes to timedOut on TIMEOUT, recording the error', async () => {
    const h = await driveTo('running.acting');
    h.a.send({ type: 'TIMEOUT', error: new Error('budget') });
    expect(h.leaf()).toBe('timedOut');
    expect(h.log.slice(-2)).toEqual(['error:budget', 'ended:timedOut']);
  });

  it('goes to failed on FAIL from the supervisor (stale, call timeout)', async () => {
    const h = await driveTo('waitingRun');
    h.a.send({ type: 'FAIL', error: new Error('stale') });
    expect(h.leaf()).toBe('failed');
  });

  it('stops the actor in every final state, so later events cannot move it', async () => {
    const h = await driveTo('queued');
    h.a.send({ type: 'CANCEL' });
    expect(h.a.getSnapshot().status).toBe('done');
  });
});
