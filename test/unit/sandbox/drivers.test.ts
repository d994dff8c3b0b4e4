import { describe, expect, it } from 'vitest';
import { buildEnter, buildLaunch, type LaunchPlan } from '../../../src/sandbox/drivers.js';
import { parseSandboxOptions } from '../../../src/sandbox/sandbox-options.js';
import { ValidationError } from '../../../src/errors.js';

const plan: LaunchPlan = {
  driver: 'bwrap',
  workdir: '/state/sandboxes/x/workspace',
  stateDir: '/state',
  homeDir: '/state/sandboxes/x/home',
  rootfs: null,
  network: false,
  limits: { maxProcesses: 64, memoryBytes: 1 << 30, fileSizeBytes: 1 << 20, cpuSeconds: 60 },
  ctlDir: '/state/sandboxes/x/ctl',
  cgroupProcs: '/sys/fs/cgroup/pids/rollout-runtime/x/cgroup.procs',
  command: ['bash', '-i'],
};

describe('buildLaunch', () => {
  it('joins the cgroup, applies rlimits, then runs bwrap with every namespace and no network', () => {
    const { argv } = buildLaunch(plan);
    expect(argv.slice(0, 4)).toEqual(['/bin/sh', '-c', 'echo $$ > "$0" 2>/dev/null; exec "$@"', plan.cgroupProcs]);
    expect(argv).toContain('--fsize=1048576');
    expect(argv).not.toContain('--nproc=64');
    const b = argv.indexOf('bwrap');
    expect(argv.slice(b, b + 3)).toEqual(['bwrap', '--unshare-all', '--die-with-parent']);
    expect(argv).not.toContain('--share-net');
    expect(argv.join(' ')).toContain('--bind /state/sandboxes/x/workspace /workspace');
    expect(argv.join(' ')).toContain('--tmpfs /state'); // the state dir is hidden
    expect(argv.slice(-2)).toEqual(['bash', '-i']);
  });

  it('shares the network only when the spec asks for it', () => {
    expect(buildLaunch({ ...plan, network: true }).argv).toContain('--share-net');
  });

  it('falls back to RLIMIT_NPROC when there is no cgroup', () => {
    expect(buildLaunch({ ...plan, cgroupProcs: null }).argv).toContain('--nproc=64');
  });

  it('uses a pid, mount, ipc, uts and net namespace with the unshare driver', () => {
    const { argv } = buildLaunch({ ...plan, driver: 'unshare' });
    for (const f of ['--user', '--map-root-user', '--pid', '--fork', '--kill-child', '--mount', '--net']) expect(argv).toContain(f);
  });

  it('enters the sandbox namespaces with nsenter for a second process', () => {
    const argv = buildEnter(plan, 1234, ['python3']);
    expect(argv.join(' ')).toContain('nsenter -t 1234 -a -r -w -- python3');
  });
});

describe('parseSandboxOptions', () => {
  it('fills defaults: 30 s bash timeouts and 10,000 output characters', () => {
    const o = parseSandboxOptions({});
    expect(o.timeouts.bashMs).toBe(30_000);
    expect(o.timeouts.noOutputMs).toBe(30_000);
    expect(o.maxOutputChars).toBe(10_000);
    expect(Object.isFrozen(o)).toBe(true);
  });

  it('throws ValidationError naming the bad field', () => {
    expect(() => parseSandboxOptions({ hosts: 0 })).toThrow(ValidationError);
  });
});
