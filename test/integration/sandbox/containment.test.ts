import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { once } from 'node:events';
import { execFileSync } from 'node:child_process';
import { createSandboxProvider, type HostSandboxProvider, type Sandbox } from '../../../src/sandbox/index.js';
import { unshareWorks } from '../../../src/sandbox/drivers.js';
import { testDriver } from './helpers.js';
import { toolPresent } from '../../helpers/system-tools.js';

// Containment with the driver the suite runs on: real bwrap here and in CI (where
// ROLLOUT_REQUIRE_BWRAP=1 makes a missing bwrap fail testDriver()); the unshare fallback on a
// machine without bwrap, which builds the same layout. `none` contains nothing: not run.
const driver = testDriver();

let stateDir: string;
let provider: HostSandboxProvider;
let sb: Sandbox;

describe.runIf(driver !== 'none')(`containment with the ${driver} driver`, () => {
  beforeAll(async () => {
    stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sbx-contain-'));
    provider = createSandboxProvider({
      driver,
      hosts: 1,
      stateDir,
      limits: { maxProcesses: 40, fileSizeBytes: 1024 * 1024 },
      timeouts: { bashMs: 10_000, noOutputMs: 10_000 },
    });
    sb = await provider.create({}, { rolloutId: 'containment' });
  });
  afterAll(async () => {
    await provider?.close();
    if (stateDir) fs.rmSync(stateDir, { recursive: true, force: true });
  });

  it('cannot write outside /workspace and /tmp', async () => {
    const r = await sb.bash({ command: 'for p in /etc/x /usr/x /x /var/x /work/x; do touch $p 2>/dev/null && echo "wrote $p"; done; touch /workspace/ok /tmp/ok && echo fine' });
    expect(r.output).toBe('fine\n');
  });

  it('keeps /tmp private: what the sandbox writes there never reaches the host', async () => {
    const name = `sbx-private-${process.pid}`;
    await sb.bash({ command: `echo x > /tmp/${name}` });
    expect(fs.existsSync(path.join('/tmp', name))).toBe(false);
  });

  it('cannot connect to a listener on the host’s 127.0.0.1', async () => {
    const server = net.createServer((s) => s.destroy());
    let connections = 0;
    server.on('connection', () => connections++);
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const port = (server.address() as net.AddressInfo).port;
    try {
      const r = await sb.bash({ command: `timeout 2 bash -c 'echo hi > /dev/tcp/127.0.0.1/${port}' 2>&1; echo "rc=$?"` });
      expect(r.output).not.toMatch(/rc=0/);
      expect(connections).toBe(0);
    } finally {
      server.close();
    }
  });

  it('cannot see or signal host processes', async () => {
    const r = await sb.bash({ command: `kill -0 ${process.pid} 2>/dev/null; echo "rc=$?"; ls /proc | grep -c '^[0-9]'` });
    const [rc, count] = r.output.trim().split('\n');
    expect(rc).toBe('rc=1');
    expect(Number(count)).toBeLessThan(10);
  });

  it('fails a write past the file size limit', async () => {
    const r = await sb.bash({ command: 'head -c 2000000 /dev/zero > /workspace/big; echo "rc=$?"; stat -c %s /workspace/big' });
    expect(r.output).not.toMatch(/rc=0/);
    expect(Number(r.output.trim().split('\n').pop())).toBeLessThanOrEqual(1024 * 1024);
  });

  it('does not show the runtime’s state dir or the host’s home', async () => {
    const home = os.homedir();
    const r = await sb.bash({ command: `ls -A ${stateDir} 2>&1 | wc -l; ls -A ${home} | wc -l; ls /run/rollout` });
    const [state, homeCount] = r.output.trim().split('\n');
    expect(state).toMatch(/^[01]$/); // missing (an error line) or empty
    expect(homeCount).toBe('0');
    expect(fs.readdirSync(home).length).toBeGreaterThan(0);
  });
  // Last: its sleeping children hold the sandbox's process slots until close.
  it('stops a fork loop at the process limit', async () => {
    const r = await sb.bash({
      command:
        "python3 -c $'import os, time\\nn = 0\\ntry:\\n    while True:\\n        if os.fork() == 0:\\n            time.sleep(60)\\n            os._exit(0)\\n        n += 1\\nexcept OSError as e:\\n    print(\"stopped\", n)'",
    });
    const m = /stopped (\d+)/.exec(r.output);
    expect(m).not.toBeNull();
    expect(Number(m![1])).toBeLessThan(40);
  });

});

// A Debian rootfs from scripts/make-rootfs.sh (mmdebstrap, ~20 s; cached): .ci/run builds it and
// sets ROLLOUT_TEST_ROOTFS=1, which makes these tests required.
const wantRootfs = process.env.ROLLOUT_TEST_ROOTFS === '1';
const rootfsWhy = !wantRootfs
  ? 'set ROLLOUT_TEST_ROOTFS=1 (builds a Debian rootfs with scripts/make-rootfs.sh: mmdebstrap or debootstrap, a Debian mirror, root)'
  : process.getuid?.() !== 0
    ? 'needs root (make-rootfs.sh)'
    : null;
if (wantRootfs && rootfsWhy) throw new Error(`ROLLOUT_TEST_ROOTFS=1 but the rootfs tests cannot run: ${rootfsWhy}`);
const rootfsDrivers = [...new Set([driver, ...(toolPresent('bwrap') && unshareWorks() ? (['unshare'] as const) : [])])].filter((d) => d !== 'none');

describe.skipIf(rootfsWhy !== null).each(rootfsDrivers)(`a Debian rootfs from scripts/make-rootfs.sh, %s driver${rootfsWhy ? ` (skipped: ${rootfsWhy})` : ''}`, (d) => {
  let dir: string;
  let rootfsProvider: HostSandboxProvider;
  let rootfs: string;
  beforeAll(() => {
    rootfs = execFileSync(path.resolve(import.meta.dirname, '../../../scripts/make-rootfs.sh'), { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }).trim().split('\n').at(-1)!;
    dir = fs.mkdtempSync(path.join(os.tmpdir(), `sbx-rootfs-${d}-`));
    rootfsProvider = createSandboxProvider({ driver: d, hosts: 1, stateDir: dir, rootfs, timeouts: { bashMs: 20_000, noOutputMs: 20_000 } });
  }, 600_000);
  afterAll(async () => {
    await rootfsProvider?.close();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('runs the shell, Python and git of the rootfs, not the host\'s, read-only but for the workspace, with nothing of the host visible', async () => {
    const sb = await rootfsProvider.create({ files: { 'seed.txt': 'seeded\n' } }, { rolloutId: `rootfs-${d}` });
    try {
      const r = await sb.bash({
        command: ". /etc/os-release; echo \"$VERSION_CODENAME\"; python3 -c 'import sys; print(sys.version_info[:2])'; git --version | cut -d' ' -f1; touch /etc/x 2>/dev/null || echo etc-ro; cat seed.txt; echo w > w.txt && cat w.txt; test -e " + JSON.stringify(dir) + " && echo host-visible || echo host-hidden; grep -E '^(CapEff|CapBnd|Seccomp):' /proc/self/status",
      });
      expect(r.output).toMatch(/^bookworm\n\(3, 11\)\ngit\netc-ro\nseeded\nw\nhost-hidden\nCapEff:\s+0+\nCapBnd:\s+0+\nSeccomp:\s+2\n$/);
      const py = await sb.python("print(open('/etc/debian_version').read()[:2], open('/workspace/w.txt').read().strip(), [l.split()[1] for l in open('/proc/self/status') if l.split(':')[0] in ('CapBnd', 'Seccomp')])");
      expect(py.error).toBeNull();
      expect(py.output).toBe("12 w ['0000000000000000', '2']\n");
      // The eval's fresh shell is the rootfs's too.
      await sb.resetShell!();
      expect((await sb.bash({ command: 'cat w.txt; . /etc/os-release; echo "$VERSION_CODENAME"' })).output).toBe('w\nbookworm\n');
    } finally {
      await sb.close();
    }
  });
});
