import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createSandboxProvider, type HostSandboxProvider, type Sandbox } from '../../../src/sandbox/index.js';
import { unshareWorks, type DriverName } from '../../../src/sandbox/drivers.js';
import { pidsByCmdline, testDriver, until } from './helpers.js';
import { toolPresent } from '../../helpers/system-tools.js';

// Issue #9 item 1 (no host root inside a sandbox) and item 12 (no host names leak in), with the
// driver the suite runs on and, where it works too, the unshare fallback. As root (CI and
// operators), these fail without the unprivileged uid, --cap-drop, no_new_privs and seccomp.
const isRoot = process.getuid?.() === 0;
const drivers: DriverName[] = [...new Set([testDriver(), ...(toolPresent('bwrap') && unshareWorks() ? (['unshare'] as const) : [])])].filter((d) => d !== 'none');

/** Python run inside the sandbox: each raw syscall's return value and errno, as `name rc errno`. */
const SYSCALLS = String.raw`
import ctypes
l = ctypes.CDLL(None, use_errno=True)
def t(name, *a):
    ctypes.set_errno(0)
    r = l.syscall(*a)
    print(name, r, ctypes.get_errno())
t('mount', 165, b'none', b'/tmp', b'tmpfs', 0, None)
t('ptrace', 101, 0, 0, 0, 0)
t('keyctl', 250, 0, -3, 1)
t('add_key', 248, b'user', b'k', b'v', 1, -3)
t('unshare', 272, 0x10000000)
t('bpf', 321, 0, 0, 0)
t('userfaultfd', 323, 0)
t('personality', 135, 0x0040000)
t('tiocsti', 16, 0, 0x5412, b' ')
t('getpid', 39)
`;

function parseSyscalls(out: string): Record<string, { rc: number; errno: number }> {
  const r: Record<string, { rc: number; errno: number }> = {};
  for (const line of out.trim().split('\n')) {
    const [name, rc, errno] = line.split(' ');
    if (name && rc !== undefined && errno !== undefined) r[name] = { rc: Number(rc), errno: Number(errno) };
  }
  return r;
}

/** Host-side /proc/<pid>/status fields of the one process whose argv is exactly `argv`. */
async function hostStatus(argv: string[]): Promise<Record<string, string>> {
  const pid = await until(() => pidsByCmdline(argv)[0]);
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return Object.fromEntries(status.split('\n').map((l) => l.split(/:\s*/, 2) as [string, string]));
}

describe.runIf(process.arch === 'x64' && drivers.length > 0).each(drivers)('privileges with the %s driver', (driver) => {
  let stateDir: string;
  let provider: HostSandboxProvider;
  let sb: Sandbox;

  beforeAll(async () => {
    stateDir = fs.mkdtempSync(path.join(os.tmpdir(), `sbx-priv-${driver}-`));
    provider = createSandboxProvider({ driver, hosts: 1, stateDir, timeouts: { bashMs: 15_000, noOutputMs: 15_000 } });
    sb = await provider.create({ files: { 'seeded.txt': 'seed\n' } }, { rolloutId: `priv-${driver}` });
  });
  afterAll(async () => {
    await provider?.close();
    if (stateDir) fs.rmSync(stateDir, { recursive: true, force: true });
  });

  it('holds no capabilities, has no_new_privs and a seccomp filter', async () => {
    const r = await sb.bash({ command: "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status" });
    const f = Object.fromEntries(r.output.trim().split('\n').map((l) => l.split(/:\s+/) as [string, string]));
    for (const c of ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb']) expect(f[c], c).toBe('0000000000000000');
    expect(f.NoNewPrivs).toBe('1');
    expect(f.Seccomp).toBe('2');
  });

  it.runIf(isRoot)('runs as an unprivileged uid and gid on the host', async () => {
    const marker = `${1000 + crypto.randomInt(1e6)}.5`;
    await sb.bash({ command: `sleep ${marker} &` });
    const st = await hostStatus(['sleep', marker]);
    for (const id of [...st.Uid!.split(/\s+/), ...st.Gid!.split(/\s+/)]) expect(Number(id)).toBeGreaterThan(0);
    expect(st.Groups?.trim() ?? '').not.toMatch(/(^|\s)0(\s|$)/);
    expect(st.CapEff).toBe('0000000000000000');
    await sb.bash({ command: 'kill %1; wait' });
  });

  it('cannot read /etc/shadow nor write /etc/passwd', async () => {
    const r = await sb.bash({ command: 'cat /etc/shadow >/dev/null 2>&1; echo "shadow=$?"; echo x >> /etc/passwd 2>/dev/null; echo "passwd=$?"' });
    expect(r.output).toMatch(/shadow=[1-9]/);
    expect(r.output).toMatch(/passwd=[1-9]/);
    expect(fs.readFileSync('/etc/passwd', 'utf8').endsWith('\nx\n')).toBe(false);
  });

  it('cannot remount a read-only bind writable to reach the host', async () => {
    const name = `sbx-remount-${process.pid}-${driver}`;
    const r = await sb.bash({ command: `mount -o remount,rw,bind /var 2>/dev/null; echo "rc=$?"; echo x > /var/tmp/${name} 2>/dev/null; echo "w=$?"` });
    expect(r.output).toMatch(/rc=[1-9]/);
    expect(r.output).toMatch(/w=[1-9]/);
    expect(fs.existsSync(`/var/tmp/${name}`)).toBe(false);
  });

  it('is refused mount, ptrace, the keyring, new namespaces, bpf, userfaultfd, personality flags and typing into its terminal (EPERM)', async () => {
    fs.mkdirSync(stateDir, { recursive: true });
    await sb.writeFile('syscalls.py', SYSCALLS);
    const r = parseSyscalls((await sb.bash({ command: 'python3 syscalls.py' })).output);
    for (const name of ['mount', 'ptrace', 'keyctl', 'add_key', 'unshare', 'bpf', 'userfaultfd', 'personality', 'tiocsti']) {
      expect(r[name], name).toEqual({ rc: -1, errno: 1 });
    }
    expect(r.getpid!.rc).toBeGreaterThan(0); // the probe itself works
  });

  it('refuses a new user namespace from a tool (unshare -U)', async () => {
    const r = await sb.bash({ command: 'unshare -U true 2>/dev/null; echo "rc=$?"' });
    expect(r.output.trim()).toBe('rc=1');
  });

  it('runs the Python REPL unprivileged, capability-less (an empty bounding set too, as the shell has) and under the same filter', async () => {
    const r = await sb.python(
      "import re\nst = open('/proc/self/status').read()\nprint(*[re.search(k + r':\\s+(\\S+)', st).group(1) for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'Seccomp', 'NoNewPrivs')])",
    );
    expect(r.error).toBeNull();
    expect(r.output.trim()).toBe('0000000000000000 0000000000000000 0000000000000000 0000000000000000 0000000000000000 2 1');
    const s = await sb.python(`exec(open('/workspace/syscalls.py').read())`);
    const calls = parseSyscalls(s.output);
    for (const name of ['mount', 'ptrace', 'keyctl', 'unshare', 'tiocsti']) expect(calls[name], name).toEqual({ rc: -1, errno: 1 });
    const shadow = await sb.python("try:\n    open('/etc/shadow').read()\n    print('read')\nexcept PermissionError:\n    print('denied')");
    expect(shadow.output.trim()).toBe('denied');
  });

  it.runIf(isRoot)('runs the Python REPL as the sandbox uid on the host', async () => {
    const marker = `${1000 + crypto.randomInt(1e6)}.25`;
    await sb.python(`import subprocess\np = subprocess.Popen(['sleep', '${marker}'])`);
    const st = await hostStatus(['sleep', marker]);
    expect(Number(st.Uid!.split(/\s+/)[0])).toBeGreaterThan(0);
    expect(st.CapEff).toBe('0000000000000000');
    await sb.python('p.kill(); p.wait()');
  });

  it('lets bash, the editor, file upload and Python all write the same workspace files', async () => {
    expect((await sb.bash({ command: 'echo more >> seeded.txt && cat seeded.txt' })).output).toBe('seed\nmore\n');
    expect((await sb.editor({ command: 'create', path: '/workspace/ed/new.txt', file_text: 'a\n' })).error).toBe(false);
    expect((await sb.bash({ command: 'echo b >> ed/new.txt && mkdir -p ed/sub && echo c > ed/sub/f' })).exitCode).toBe(0);
    await sb.writeFile('up/load.txt', 'u\n');
    expect((await sb.bash({ command: 'echo v >> up/load.txt && cat up/load.txt' })).output).toBe('u\nv\n');
    expect((await sb.editor({ command: 'str_replace', path: '/workspace/ed/sub/f', old_str: 'c', new_str: 'd' })).error).toBe(false);
    expect((await sb.python("open('/workspace/ed/new.txt', 'a').write('p\\n'); print(open('/workspace/ed/new.txt').read())")).output).toBe('a\nb\np\n\n');
    expect(await sb.readFile('ed/sub/f')).toBe('d\n');
    // Everything in the workspace belongs to the sandbox's own uid.
    const owners = await sb.bash({ command: 'find . -printf "%U:%G\\n" | sort -u' });
    expect(owners.output.trim().split('\n')).toHaveLength(1);
  });

  it('shows no state dir, sandbox id, cgroup path or host workdir in its environment', async () => {
    const r = await sb.bash({ command: 'env; echo "PWD=$PWD"; cat /proc/self/cgroup /proc/self/mountinfo; ls -A /sys/fs/cgroup' });
    expect(r.output).not.toContain(stateDir);
    expect(r.output).not.toContain(sb.id);
    expect(r.output).not.toContain('rollout-runtime');
    expect(r.output).toContain('PWD=/workspace');
    const cg = await sb.bash({ command: 'cat /proc/self/cgroup' });
    for (const line of cg.output.trim().split('\n')) expect(line).toMatch(/:\/$/);
  });
});

describe.runIf(drivers.length > 0).each(drivers)('a task PATH through directories the policy writes, with the %s driver', (driver) => {
  // A venv in the workspace on the task's PATH is common. Had the launch or the REPL's entry
  // looked a tool up on that PATH while privileged (as root: host root, every capability) or
  // before the seccomp filter, what the policy wrote there would have run instead; had a new
  // shell been looked up there, the policy's own `bash` would answer the eval.
  const TOOLS = ['nsenter', 'setpriv', 'python3', 'chroot', 'prlimit', 'bwrap', 'unshare', 'env', 'sh', 'bash'];
  const FAKE = '#!/bin/sh\necho "PLANTED $0 uid=$(id -u)" >&2\nexit 97\n';
  let stateDir: string;
  let provider: HostSandboxProvider;

  beforeAll(() => {
    stateDir = fs.mkdtempSync(path.join(os.tmpdir(), `sbx-path-${driver}-`));
    provider = createSandboxProvider({ driver, hosts: 1, stateDir, timeouts: { bashMs: 15_000, noOutputMs: 15_000 } });
  });
  afterAll(async () => {
    await provider?.close();
    if (stateDir) fs.rmSync(stateDir, { recursive: true, force: true });
  });

  it('never runs what the policy planted there: the REPL and a restarted shell start, and both see the task PATH', async () => {
    // 'bin' (relative) as well: the host starts a shell with the workspace as its cwd.
    const taskPath = '/workspace/bin:bin:/usr/local/bin:/usr/bin:/bin';
    const sb = await provider.create({ env: { PATH: taskPath } }, { rolloutId: `path-${driver}` });
    try {
      for (const t of TOOLS) await sb.writeFile(`bin/${t}`, FAKE);
      await sb.bash({ command: '/bin/chmod +x /workspace/bin/*' });
      const py = await sb.python("import os\nprint(os.environ['PATH'])");
      expect(py.error).toBeNull();
      expect(py.output).toBe(`${taskPath}\n`);
      // `exit` ends the shell; the next call starts a new one through the whole launch again.
      await sb.bash({ command: 'exit 0' });
      const r = await sb.bash({ command: 'echo "PATH=$PATH"; command -v nsenter' });
      expect(r.output).not.toContain('PLANTED');
      expect(r.output).toContain(`PATH=${taskPath}\n/workspace/bin/nsenter`);
    } finally {
      await sb.close();
    }
  });
});

describe('a rootfs the sandbox cannot use', () => {
  it('is refused when the provider is made, naming rootfs: missing, not a directory, or (as root) behind a directory the sandbox uid cannot pass', () => {
    const outer = fs.mkdtempSync(path.join(os.tmpdir(), 'sbx-rootfs-'));
    try {
      const opts = (rootfs: string) => ({ driver: drivers[0] ?? 'none', hosts: 1, stateDir: path.join(outer, 'state'), rootfs }) as const;
      expect(() => createSandboxProvider(opts(path.join(outer, 'missing')))).toThrow(/rootfs .*missing: no such directory/);
      fs.writeFileSync(path.join(outer, 'file'), '');
      expect(() => createSandboxProvider(opts(path.join(outer, 'file')))).toThrow(expect.objectContaining({ name: 'ValidationError', details: expect.objectContaining({ issues: [expect.objectContaining({ path: 'rootfs' })] }) }));
      if (isRoot) {
        fs.mkdirSync(path.join(outer, 'locked', 'root'), { recursive: true });
        fs.chmodSync(path.join(outer, 'locked'), 0o700);
        expect(() => createSandboxProvider(opts(path.join(outer, 'locked', 'root')))).toThrow(/cannot pass .*locked \(chmod o\+x/);
      }
    } finally {
      fs.rmSync(outer, { recursive: true, force: true });
    }
  });
});

describe.runIf(isRoot && drivers.length > 0)('a state dir the sandbox uid cannot reach', () => {
  it('refuses to create a sandbox with STATE_DIR_UNREACHABLE and leaves nothing behind', async () => {
    const outer = fs.mkdtempSync(path.join(os.tmpdir(), 'sbx-locked-'));
    fs.chmodSync(outer, 0o700);
    const stateDir = path.join(outer, 'state');
    const provider = createSandboxProvider({ driver: drivers[0], hosts: 1, stateDir });
    try {
      await expect(provider.create({}, { rolloutId: 'locked' })).rejects.toMatchObject({ name: 'SandboxError', code: 'STATE_DIR_UNREACHABLE' });
      expect(fs.readdirSync(path.join(stateDir, 'sandboxes'))).toEqual([]);
    } finally {
      await provider.close();
      fs.rmSync(outer, { recursive: true, force: true });
    }
  });
});

