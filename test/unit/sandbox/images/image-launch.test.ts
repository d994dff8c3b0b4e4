import { describe, expect, it } from 'vitest';
import { buildEnter, buildLaunch, type LaunchPlan } from '../../../../src/sandbox/drivers.js';

// The launch of an image sandbox (drivers.ts with LaunchPlan.imageRoot): who the sandbox runs as
// inside, where it starts, and how an overlay in its own user namespace is entered.
const plan: LaunchPlan = {
  driver: 'bwrap',
  workdir: '/state/sandboxes/x/fs/ov/merged/testbed',
  stateDir: '/state',
  homeDir: '/state/sandboxes/x/fs/home',
  rootfs: null,
  imageRoot: { merged: '/state/sandboxes/x/fs/ov/merged', cwd: '/testbed', uid: 1234, gid: 2345, home: '/home/agent' },
  network: false,
  limits: { maxProcesses: 64, memoryBytes: 1 << 30, fileSizeBytes: 1 << 20, cpuSeconds: 60, totalMemoryBytes: 1 << 30, tmpBytes: 1 << 24, workdirBytes: 1 << 28 },
  ctlDir: '/state/sandboxes/x/fs/ctl',
  cgroupProcs: null,
  memoryCgroupProcs: null,
  sandboxUid: 2000000123,
  seccompFile: '/state/sandboxes/x/fs/ctl/seccomp.bpf',
  resolvConf: null,
  sandboxPath: '/usr/bin:/bin',
  command: ['/entry.sh', 'bash', '-i'],
};

describe('image sandbox launch', () => {
  it("bwrap: the image's uid/gid inside (the host uid still the hashed one), its root writable, its WorkingDir and HOME", () => {
    const l = buildLaunch(plan);
    const a = l.argv.join(' ');
    expect(a).toContain('setpriv --reuid=2000000123 --regid=2000000123');
    expect(a).toContain('--uid 1234 --gid 2345');
    expect(a).not.toContain('--uid 1000');
    expect(a).toContain('--bind /state/sandboxes/x/fs/ov/merged /');
    expect(a).not.toContain('--remount-ro /');
    expect(a).toContain('--chdir /testbed -- /entry.sh bash -i');
    expect(l.home).toBe('/home/agent');
    // bwrap changes to its --chdir itself; started in /, its pid 1 shows no host path as cwd or $PWD.
    expect(l.hostCwd).toBe('/');
  });

  it('unshare: a non-root image user is mapped with --map-user/--map-group and --keep-caps; root with --map-root-user; the root stays writable', () => {
    const u = buildLaunch({ ...plan, driver: 'unshare' }).argv;
    expect(u).toEqual(expect.arrayContaining(['--map-user=1234', '--map-group=2345', '--keep-caps']));
    expect(u).not.toContain('--map-root-user');
    const i = u.indexOf(plan.imageRoot!.merged);
    // rootfs = the overlay, then /tmp size, seccomp path, loader, writable flag, start dir.
    expect(u.slice(i + 4, i + 6)).toEqual(['1', '/testbed']);
    expect(u[u.indexOf('sh', u.indexOf('-c')) + 1]).toBe('/state/sandboxes/x/fs/root');
    const r = buildLaunch({ ...plan, driver: 'unshare', imageRoot: { ...plan.imageRoot!, uid: 0, gid: 0, home: '/root' } });
    expect(r.argv).toContain('--map-root-user');
    expect(r.argv).not.toContain('--keep-caps');
    expect(r.home).toBe('/root');
  });

  it('an overlay held in its own user namespace: the driver starts inside it (nsenter -U -m), from /', () => {
    const l = buildLaunch({ ...plan, sandboxUid: null, imageRoot: { ...plan.imageRoot!, enterPid: 4242 } });
    const a = l.argv.join(' ');
    expect(a).toContain('nsenter -t 4242 -U -m --preserve-credentials -- bwrap');
    expect(l.hostCwd).toBe('/');
    expect(buildLaunch(plan).argv).not.toContain('nsenter');
  });

  it("the REPL enters as the image's uid/gid; as the image's root it drops its namespace capabilities first", () => {
    expect(buildEnter(plan, 99, ['python3'], '/usr/bin/python3').slice(-4)).toEqual(['99', '1234', '2345', 'python3']);
    expect(buildEnter(plan, 99, ['python3'], null).join(' ')).toContain('nsenter -t 99 -U -C -i -u -n -p -m -r -w -S 1234 -G 2345 -- python3');
    const root = { ...plan, imageRoot: { ...plan.imageRoot!, uid: 0, gid: 0, home: '/root' } };
    // The host's Python empties the bounding set itself; nsenter needs the image's setpriv for it.
    expect(buildEnter(root, 99, ['python3'], '/usr/bin/python3').slice(-4)).toEqual(['99', '0', '0', 'python3']);
    expect(buildEnter(root, 99, ['python3'], null).join(' ')).toContain('-S 0 -G 0 -- setpriv --inh-caps=-all --bounding-set=-all --no-new-privs -- python3');
    expect(buildEnter({ ...root, sandboxUid: null }, 99, ['python3']).join(' ')).toContain('--preserve-credentials -r -w -- setpriv --inh-caps=-all --bounding-set=-all --no-new-privs -- python3');
  });
});
