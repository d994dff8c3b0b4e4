import { describe, expect, it } from 'vitest';
import { NodeHealth, sandboxFault } from '../../../src/cluster/node-health.js';

const err = (name: string, code: string) => ({ name, code, message: 'm', retryable: true });

describe('sandboxFault: which results say a node may not run sandboxes (#28 §4)', () => {
  it.each([
    ['an infra-error from a sandbox that cannot reach its state dir', 'infra-error', err('SandboxError', 'STATE_DIR_UNREACHABLE'), 'STATE_DIR_UNREACHABLE: m'],
    ['an infra-error from a sandbox host that died', 'infra-error', err('SandboxError', 'SANDBOX_LOST'), 'SANDBOX_LOST: m'],
    ['an infra-error of a closing provider', 'infra-error', err('SandboxError', 'PROVIDER_CLOSED'), null],
    ['a backend fault', 'infra-error', err('BackendError', 'BACKEND'), null],
    ['a task error', 'task-error', err('TaskError', 'IMAGE_NOT_FOUND'), null],
    ['a scored rollout', 'completed', null, null],
  ] as const)('%s → %s', (_what, outcome, error, want) => {
    expect(sandboxFault({ outcome, error } as never)).toBe(want);
  });
});

describe('NodeHealth', () => {
  it('pauses, probes once, and resumes at once when the probe passes (the fault was the job\'s)', async () => {
    const calls: string[] = [];
    const h = new NodeHealth({ probe: async () => void calls.push('probe'), pause: () => calls.push('pause'), resume: () => calls.push('resume'), probeMs: 60_000, log: () => undefined });
    expect(await h.report('SANDBOX_LOST: m')).toBe(true);
    expect(calls).toEqual(['pause', 'probe', 'resume']);
    expect(h.unhealthy).toBeNull();
    h.close();
  });

  it('shares one probe between faults that arrive together, and stays unhealthy while probes fail', async () => {
    let release: (ok: boolean) => void = () => undefined;
    let probes = 0;
    const paused: number[] = [];
    const h = new NodeHealth({
      probe: () => {
        probes++;
        return new Promise((resolve, reject) => (release = (ok) => (ok ? resolve() : reject(new Error('no sandbox')))));
      },
      pause: () => paused.push(1),
      resume: () => undefined,
      probeMs: 60_000,
      log: () => undefined,
    });
    const a = h.report('STATE_DIR_UNREACHABLE: x');
    const b = h.report('STATE_DIR_UNREACHABLE: y');
    release(false);
    expect(await Promise.all([a, b])).toEqual([false, false]);
    expect([probes, paused.length, h.unhealthy]).toEqual([1, 1, 'STATE_DIR_UNREACHABLE: x']);
    // Already unhealthy: a further fault is answered without a new probe.
    expect(await h.report('STATE_DIR_UNREACHABLE: z')).toBe(false);
    expect(probes).toBe(1);
    h.close();
  });
});
