import { describe, expect, it } from 'vitest';
import type { FileObservationResult } from '../../../src/protocol/integrity.js';
import type { RolloutResult } from '../../../src/protocol/trajectory.js';
import { effectivePolicy, RolloutIntegrity, withIntegrity } from '../../../src/runtime/integrity-monitor.js';
import type { Sandbox } from '../../../src/sandbox/sandbox.js';

const obs = (over: Partial<FileObservationResult> = {}): FileObservationResult => ({ violations: [], created: 0, modified: 0, deleted: 0, entries: 3, truncated: false, ms: 0.5, ...over });
const policy = { protect: ['tests/**'], secret: [], denyExec: [], action: 'flag' as const };

describe('effectivePolicy', () => {
  it('is null without an instance policy or a family default', () => {
    expect(effectivePolicy(undefined, null)).toBeNull();
  });

  it("adds the instance's lists to the family's, and drops the family's with defaults: false", () => {
    const fam = { protect: ['tests/a.py', 'conftest.py'], secret: ['.git'] };
    const own = { protect: ['conftest.py', 'setup.cfg'], secret: [], deny_exec: ['pip'], on_violation: 'zero' as const, defaults: true };
    expect(effectivePolicy(own, fam)).toEqual({ protect: ['tests/a.py', 'conftest.py', 'setup.cfg'], secret: ['.git'], denyExec: ['pip'], action: 'zero' });
    expect(effectivePolicy({ ...own, defaults: false }, fam)).toEqual({ protect: ['conftest.py', 'setup.cfg'], secret: [], denyExec: ['pip'], action: 'zero' });
    expect(effectivePolicy(undefined, fam)).toEqual({ protect: ['tests/a.py', 'conftest.py'], secret: ['.git'], denyExec: [], action: 'flag' });
  });
});

describe('RolloutIntegrity', () => {
  it('runs degraded, saying why, in a sandbox without a monitor — never failing the rollout', async () => {
    const m = new RolloutIntegrity(policy);
    await m.start({ id: 'x' } as Sandbox);
    expect(await m.observe({ id: 'x' } as Sandbox, 0)).toEqual([]);
    expect(m.report()).toMatchObject({ violations: [], mode: 'degraded', reason: 'this sandbox has no integrity monitor', actions: 0 });
  });

  it('runs degraded when the monitor fails to start, and when an observation fails keeps what it saw', async () => {
    const failing = { id: 'x', integrity: () => Promise.reject(new Error('host gone')) } as unknown as Sandbox;
    const a = new RolloutIntegrity(policy);
    await a.start(failing);
    expect(a.report()).toMatchObject({ mode: 'degraded', reason: 'the monitor did not start: host gone' });

    const v = { kind: 'edit-protected' as const, turn: 0, path: 'tests/a.py', detail: '' };
    let calls = 0;
    const flaky = { id: 'y', integrity: () => (++calls <= 2 ? Promise.resolve(obs(calls === 2 ? { violations: [v] } : {})) : Promise.reject(new Error('lost'))) } as unknown as Sandbox;
    const b = new RolloutIntegrity(policy);
    await b.start(flaky);
    expect(await b.observe(flaky, 0)).toEqual([v]);
    expect(await b.observe(flaky, 1)).toEqual([]);
    expect(b.report()).toMatchObject({ violations: [v], mode: 'degraded', reason: 'an observation failed: lost', actions: 1, monitorMs: 1 });
  });

  it('is degraded, saying why, only for what the host cannot observe that the policy needs', async () => {
    const unobserved = [
      { what: 'exec', why: 'no python3' },
      { what: 'reads', why: 'no python3' },
    ] as const;
    const sb = { id: 'u', integrity: () => Promise.resolve(obs({ unobserved: [...unobserved] })) } as unknown as Sandbox;
    const plain = new RolloutIntegrity(policy);
    await plain.start(sb);
    expect(plain.report()).toMatchObject({ mode: 'full' });
    const secret = new RolloutIntegrity({ ...policy, secret: ['.git'] });
    await secret.start(sb);
    expect(secret.report()).toMatchObject({ mode: 'degraded', reason: 'secret reads not observed: no python3' });
    const both = new RolloutIntegrity({ ...policy, secret: ['.git'], denyExec: ['pip'] });
    await both.start(sb);
    await both.observe(sb, 0);
    expect(both.report()).toMatchObject({ mode: 'degraded', reason: 'executed programs not observed: no python3; secret reads not observed: no python3' });
    const net = new RolloutIntegrity(policy);
    const sbNet = { id: 'n', integrity: () => Promise.resolve(obs({ unobserved: [{ what: 'network', why: 'driver none' }] })) } as unknown as Sandbox;
    await net.start(sbNet);
    expect(net.report()).toMatchObject({ mode: 'degraded', reason: 'network attempts not observed: driver none' });
  });

  it('matches the programs run against deny_exec, at their turn, and lists them', async () => {
    const execs = [{ argv: ['python3', '-m', 'pip', 'install', 'x'] }, { argv: null }, { argv: ['ls'] }];
    const sb = { id: 'e', integrity: (r: { op: string }) => Promise.resolve(obs(r.op === 'observe' ? { execs } : {})) } as unknown as Sandbox;
    const m = new RolloutIntegrity({ ...policy, denyExec: ['pip install'] });
    await m.start(sb);
    m.observeInBackground(sb, 3);
    await m.settle();
    expect(m.violations).toEqual([{ kind: 'exec-denied', turn: 3, argv: ['python3', '-m', 'pip', 'install', 'x'], detail: "ran a program deny_exec refuses ('pip install')" }]);
    expect(m.report().execs).toEqual(execs.map((e) => ({ turn: 3, argv: e.argv })));
  });

  it('is full when it started and every scan covered the workspace', async () => {
    const sb = { id: 'z', integrity: () => Promise.resolve(obs()) } as unknown as Sandbox;
    const m = new RolloutIntegrity(policy);
    await m.start(sb);
    await m.observe(sb, 0);
    expect(m.report()).toEqual({ violations: [], action: 'flag', mode: 'full', actions: 1, monitorMs: 1, execs: [] });
  });
});

describe('withIntegrity', () => {
  const base = { reward: 1, resolved: true, evalDetails: { x: 1 }, trajectory: { turns: [{ outputIds: [1] }, { outputIds: [2] }], lossMask: [0, 1, 0, 1], segments: undefined } } as unknown as RolloutResult;
  const flagged = async (action: 'flag' | 'mask' | 'zero') => {
    const sb = { id: 'z', integrity: (r: { op: string }) => Promise.resolve(obs(r.op === 'observe' ? { violations: [{ kind: 'delete-protected', turn: 0, path: 't.py', detail: '' }] } : {})) } as unknown as Sandbox;
    const m = new RolloutIntegrity({ ...policy, action });
    await m.start(sb);
    await m.observe(sb, 0);
    return withIntegrity(base, m);
  };

  it('flag attaches the report and changes nothing else', async () => {
    const r = await flagged('flag');
    expect([r.reward, r.resolved, r.trajectory.lossMask, r.evalDetails, r.integrity?.violations.length]).toEqual([1, true, [0, 1, 0, 1], { x: 1 }, 1]);
  });

  it('zero sets the reward to 0 and keeps the reward before it in the details', async () => {
    const r = await flagged('zero');
    expect([r.reward, r.resolved, r.evalDetails?.rewardBeforeIntegrity, r.trajectory.lossMask]).toEqual([0, false, 1, [0, 1, 0, 1]]);
  });

  it('mask zeroes the sampled tokens after the violating turn and keeps the reward', async () => {
    const r = await flagged('mask');
    expect([r.reward, r.trajectory.lossMask, base.trajectory.lossMask]).toEqual([1, [0, 1, 0, 0], [0, 1, 0, 1]]);
  });
});
