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
  limits: { maxProcesses: 64, memoryBytes: 1 << 30, fileSizeBytes: 1 << 20, cpuSeconds: 60, totalMemoryBytes: 1 << 30, tmpBytes: 1 << 24, workdirBytes: 1 << 28 },
  ctlDir: '/state/sandboxes/x/ctl',
  cgroupProcs: '/sys/fs/cgroup/pids/rollout-runtime/x/cgroup.procs',
  memoryCgroupProcs: '/sys/fs/cgroup/memory/rollout-runtime/x/cgroup.procs',
  sandboxUid: 2000000123,
  seccompFile: '/state/sandboxes/x/ctl/seccomp.bpf',
  resolvConf: null,
  sandboxPath: '/workspace/.venv/bin:/usr/bin:/bin',
  command: ['bash', '-i'],
};

describe('buildLaunch', () => {
  it('joins both cgroups, opens the seccomp filter, applies rlimits, then runs bwrap with every namespace and no network', () => {
    const { argv } = buildLaunch(plan);
    expect(argv.slice(3, 6)).toEqual([plan.cgroupProcs, plan.memoryCgroupProcs, plan.seccompFile]);
    expect(argv[2]).toContain('exec 9<"$2"');
    // The freezer group too, before bwrap makes the cgroup namespace (#26): none here.
    expect(argv[6]).toBe('/dev/null');
    expect(buildLaunch({ ...plan, freezerCgroupProcs: '/sys/fs/cgroup/freezer/rollout-runtime/x/cgroup.procs' }).argv[6]).toBe('/sys/fs/cgroup/freezer/rollout-runtime/x/cgroup.procs');
    expect(argv).toContain('--fsize=1048576');
    expect(argv).not.toContain('--nproc=64');
    const b = argv.indexOf('bwrap');
    expect(argv.slice(b, b + 2)).toEqual(['bwrap', '--unshare-all']);
    expect(argv).not.toContain('--share-net');
    expect(argv.join(' ')).toContain('--bind /state/sandboxes/x/workspace /workspace');
    expect(argv.join(' ')).toContain('--tmpfs /state'); // the state dir is hidden
    expect(argv.join(' ')).toContain('--tmpfs /sys/fs/cgroup'); // other sandboxes' cgroup names too
    expect(argv.slice(-2)).toEqual(['bash', '-i']);
  });

  it("with an args file, bwrap's own arguments (host paths) leave its argv for the file, read on fd 8", () => {
    const l = buildLaunch({ ...plan, argsFile: '/state/sandboxes/x/fs/bwrap.args' });
    expect(l.argv[2]).toContain('exec 9<"$2" 8<"$4" && shift 4');
    expect(l.argv[7]).toBe('/state/sandboxes/x/fs/bwrap.args');
    const b = l.argv.indexOf('bwrap');
    expect(l.argv.slice(b)).toEqual(['bwrap', '--args', '8', '--', 'bash', '-i']);
    const inFile = l.argsData!.split('\0');
    expect(inFile.at(-1)).toBe('');
    expect(inFile.slice(0, 2)).toEqual(['--unshare-all', '--unshare-user']);
    expect(inFile.join(' ')).toContain('--bind /state/sandboxes/x/workspace /workspace');
    expect(inFile).not.toContain('--');
    expect(l.hostCwd).toBe('/');
  });

  it('drops host root to the sandbox uid with no capabilities before bwrap', () => {
    const { argv } = buildLaunch(plan);
    const s = argv.indexOf('setpriv');
    expect(s).toBeGreaterThan(0);
    expect(s).toBeLessThan(argv.indexOf('bwrap'));
    expect(argv.slice(s, s + 8)).toEqual(['setpriv', '--reuid=2000000123', '--regid=2000000123', '--clear-groups', '--inh-caps=-all', '--bounding-set=-all', '--no-new-privs', '--']);
    const b = argv.slice(argv.indexOf('bwrap')).join(' ');
    expect(b).toContain('--uid 1000 --gid 1000');
    expect(b).toContain('--cap-drop ALL');
    expect(b).toContain('--seccomp 9');
  });

  it('keeps its own uid when not root, and disables nested user namespaces without a filter', () => {
    const { argv } = buildLaunch({ ...plan, sandboxUid: null, seccompFile: null });
    expect(argv).not.toContain('setpriv');
    expect(argv[5]).toBe('/dev/null');
    expect(argv).toContain('--disable-userns');
  });

  it('caps /tmp and /dev/shm at tmpBytes', () => {
    const b = buildLaunch(plan).argv.join(' ');
    expect(b).toContain(`--size ${1 << 24} --tmpfs /tmp`);
    expect(b).toContain(`--size ${1 << 24} --tmpfs /dev/shm`);
  });

  it('never shares the host network, even when the spec asks for network', () => {
    const { argv } = buildLaunch({ ...plan, network: true, resolvConf: '/state/sandboxes/x/ctl/resolv.conf' });
    expect(argv).not.toContain('--share-net');
    expect(argv.join(' ')).toContain('--ro-bind /state/sandboxes/x/ctl/resolv.conf /etc/resolv.conf');
  });

  it('falls back to RLIMIT_NPROC when there is no cgroup', () => {
    expect(buildLaunch({ ...plan, cgroupProcs: null }).argv).toContain('--nproc=64');
  });

  it('uses a user, pid, mount, ipc, uts, net and cgroup namespace with the unshare driver, entered as the sandbox uid', () => {
    const { argv } = buildLaunch({ ...plan, driver: 'unshare', network: true });
    for (const f of ['--user', '--map-root-user', '--pid', '--fork', '--kill-child', '--mount', '--net', '--cgroup']) expect(argv).toContain(f);
    const s = argv.indexOf('setpriv');
    expect(s).toBeLessThan(argv.indexOf('unshare'));
    expect(argv.slice(s, argv.indexOf('unshare'))).not.toContain('--bounding-set=-all'); // the prelude needs its userns caps
    const prelude = argv[argv.indexOf('-c', argv.indexOf('unshare')) + 1]!;
    expect(prelude).toContain('setpriv --inh-caps=-all --bounding-set=-all --no-new-privs');
    expect(argv).toContain('/run/rollout/seccomp.bpf');
  });

  it('enters a bwrap sandbox as root with the host\'s Python: every namespace, the shell\'s user namespace last, an empty bounding set, uid 1000', () => {
    const argv = buildEnter(plan, 1234, ['python3'], '/usr/bin/python3');
    const py = argv.indexOf('/usr/bin/python3');
    expect(argv.slice(py, py + 4)).toEqual(['/usr/bin/python3', '-I', '-S', '-c']);
    expect(argv.slice(py + 5)).toEqual(['1234', '1000', '1000', 'python3']);
    // The entry program: the user namespace joined last, then the bounding set dropped, then the uid.
    const prog = argv[py + 4]!;
    expect(prog.indexOf("'mnt', 'user')")).toBeGreaterThan(0);
    expect(prog.indexOf("'mnt', 'user')")).toBeLessThan(prog.indexOf('\ndrop_bounding_set()'));
    expect(prog.indexOf('\ndrop_bounding_set()')).toBeLessThan(prog.indexOf('os.setresuid'));
    // Nothing is looked up inside the sandbox's root while privileged: no nsenter, no setpriv.
    expect(argv.filter((a) => a === 'nsenter' || a === 'setpriv')).toEqual([]);
    expect(argv.slice(3, 5)).toEqual([plan.cgroupProcs, plan.memoryCgroupProcs]);
  });

  it('without a host python3, enters a bwrap sandbox with the host\'s nsenter alone (the bounding set then stays full)', () => {
    const argv = buildEnter(plan, 1234, ['python3'], null);
    expect(argv.join(' ')).toContain('setpriv --no-new-privs -- nsenter -t 1234 -U -C -i -u -n -p -m -r -w -S 1000 -G 1000 -- python3');
    expect(argv.filter((a) => a === 'nsenter' || a === 'setpriv')).toEqual(['setpriv', 'nsenter']);
  });

  it('gives the sandbox its own PATH only at its command: bwrap sets it for the shell, the unshare prelude takes it with the host python3', () => {
    const b = buildLaunch(plan).argv;
    const dash = b.lastIndexOf('--');
    expect(b.slice(0, dash).join(' ')).toContain('--setenv PATH /workspace/.venv/bin:/usr/bin:/bin');
    const u = buildLaunch({ ...plan, driver: 'unshare' }, '/usr/bin/python3').argv;
    expect(u.slice(-plan.command.length - 2, -plan.command.length)).toEqual([plan.sandboxPath, '/usr/bin/python3']);
  });

  it('finishes an unshare launch in the host\'s Python when there is one (no python3 or setpriv needed in the root), else in the root\'s', () => {
    const withPy = buildLaunch({ ...plan, driver: 'unshare' }, '/usr/bin/python3').argv;
    const prelude = withPy[withPy.indexOf('-c', withPy.indexOf('unshare')) + 1]!;
    expect(prelude).toContain('exec "$Y" -I -S -c "$X" "$R" "$D" "$P" "$Q" "$@"');
    const finish = withPy[withPy.indexOf(prelude) + 10]!;
    // chroot first, then the capability sets, then no_new_privs and the filter, then the exec.
    const at = (needle: string): number => finish.indexOf(needle);
    expect(at('os.chroot(root)')).toBeLessThan(at('\ndrop_bounding_set()'));
    expect(at('\ndrop_bounding_set()')).toBeLessThan(at('capset'));
    expect(at('capset')).toBeLessThan(at('prctl(38'));
    expect(at('prctl(38')).toBeLessThan(at('prctl(22'));
    expect(at('prctl(22')).toBeLessThan(at('os.execvp('));
    // Without one: the root's own setpriv and python3 loader ($X, ten arguments after the prelude).
    const without = buildLaunch({ ...plan, driver: 'unshare' }, null).argv;
    expect(without.at(-plan.command.length - 1)).toBe('');
    expect(without[without.indexOf(prelude) + 10]).toContain('_rollout_seccomp');
  });

  it('enters an unshare sandbox as the sandbox uid and empties the bounding set before the command', () => {
    const argv = buildEnter({ ...plan, driver: 'unshare' }, 1234, ['python3']);
    expect(argv.indexOf('setpriv')).toBeLessThan(argv.indexOf('nsenter'));
    expect(argv.join(' ')).toContain('nsenter -t 1234 -U -C -i -u -n -p -m --preserve-credentials -r -w -- setpriv --inh-caps=-all --bounding-set=-all --no-new-privs -- python3');
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

  it('defaults the per-sandbox totals: 4 GiB memory, 1 GiB /tmp, 4 GiB workdir, uids from 2,000,000,000', () => {
    const o = parseSandboxOptions({});
    expect(o.limits).toMatchObject({ totalMemoryBytes: 4 * 1024 ** 3, tmpBytes: 1024 ** 3, workdirBytes: 4 * 1024 ** 3 });
    expect(o.sandboxUids).toEqual({ base: 2_000_000_000, count: 1_000_000 });
  });

  it('refuses a zero size or a uid range that leaves 32 bits, naming the field', () => {
    expect(() => parseSandboxOptions({ limits: { tmpBytes: 0 } })).toThrow(/limits\.tmpBytes/);
    expect(() => parseSandboxOptions({ limits: { workdirBytes: -1 } })).toThrow(/limits\.workdirBytes/);
    expect(() => parseSandboxOptions({ sandboxUids: { base: 0xfffff000, count: 1 << 20 } })).toThrow(/sandboxUids/);
    expect(() => parseSandboxOptions({ sandboxUids: { base: 0 } })).toThrow(/sandboxUids\.base/);
  });
});
