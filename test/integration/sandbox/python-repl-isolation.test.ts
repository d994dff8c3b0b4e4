import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createSandboxProvider, type HostSandboxProvider, type Sandbox } from '../../../src/sandbox/index.js';
import { testDriver } from './helpers.js';

/**
 * The sandbox user's home is writable, and the interpreter runs every `.pth` in its user site at
 * start-up: the REPL must not run any of it before its seccomp filter is in place (#28 §5.4), and
 * what it runs after is the policy's outcome, not a REPL that failed to start (#28 §5.5).
 */
const driver = testDriver();

/** Python, run by the sandbox user in its shell, that plants `body` as a `.pth` of its user site. */
function plantPth(body: string): string {
  const py = `import site, os; d = site.getusersitepackages(); os.makedirs(d, exist_ok=True); open(os.path.join(d, 'zz-policy.pth'), 'w').write(${JSON.stringify(body)} + '\\n'); print(d)`;
  return `python3 -c ${JSON.stringify(py).replace(/\$/g, '\\$')}`;
}

// One line, as site.py runs a .pth line that starts with `import`: it records the filter state
// and tries to leave the sandbox's user namespace and mount a tmpfs.
const PROBE =
  "import os, ctypes; s = [l.split()[1] for l in open('/proc/self/status') if l.startswith('Seccomp:')][0]; " +
  "c = ctypes.CDLL('libc.so.6', use_errno=True); u = c.unshare(0x10000000); m = c.mount(b'x', b'/tmp', b'tmpfs', 0, None); " +
  "open('/workspace/pth-ran', 'a').write('seccomp=%s unshare=%d mount=%d\\n' % (s, u, m))";

let stateDir: string;
let provider: HostSandboxProvider;

describe.runIf(driver !== 'none')(`the Python REPL with a hostile user site (${driver})`, () => {
  beforeAll(() => {
    stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sbx-pyrepl-'));
    fs.chmodSync(stateDir, 0o711);
    provider = createSandboxProvider({ driver, hosts: 1, stateDir, timeouts: { bashMs: 20_000, noOutputMs: 20_000 } });
  });
  afterAll(async () => {
    await provider?.close();
    if (stateDir) fs.rmSync(stateDir, { recursive: true, force: true });
  });

  it('runs a planted .pth only under the seccomp filter, where unshare and mount fail', async () => {
    const sb: Sandbox = await provider.create({}, { rolloutId: 'pth-probe' });
    try {
      const planted = await sb.bash({ command: plantPth(PROBE) });
      expect(planted.exitCode).toBe(0);
      const r = await sb.python('import sys; print(sys.flags.isolated, 2 + 2)');
      const lines = (await sb.readFile('pth-ran')).trim().split('\n');
      // Once, at start-up, after the filter: mode 2, and both calls refused (-1).
      expect(lines).toEqual(['seccomp=2 unshare=-1 mount=-1']);
      expect(r.error).toBeNull();
      expect(r.output).toContain('1 4');
      // The user site still works as a plain python3's does (pip install --user), filtered.
      expect((await sb.python("import site, sys; print(site.getusersitepackages() in sys.path)")).output).toContain('True');
    } finally {
      await sb.close();
    }
  });

  it("answers a .pth that ends the interpreter as the cell's output, not as a REPL that did not start", async () => {
    const sb: Sandbox = await provider.create({}, { rolloutId: 'pth-exit' });
    try {
      expect((await sb.bash({ command: plantPth('import os; os._exit(3)') })).exitCode).toBe(0);
      const r = await sb.python('print("never")');
      expect(r.output).not.toContain('never');
      expect(r.error).toMatch(/Python REPL exited/);
      // And again on the next cell (a fresh REPL, the same .pth): still an answer, never a throw.
      expect((await sb.python('1')).error).toMatch(/Python REPL exited/);
      // The sandbox is fine: the policy removes its .pth and Python works again.
      const rm = await sb.bash({ command: 'rm -v "$(python3 -I -c "import site; print(site.getusersitepackages())")/zz-policy.pth"' });
      expect(rm.output).toContain('removed');
      expect(await sb.python('6 * 7')).toMatchObject({ output: '42\n', error: null });
    } finally {
      await sb.close();
    }
  });
});
