import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createSandboxProvider, type HostSandboxProvider } from '../../../../src/sandbox/index.js';
import { ImageStore } from '../../../../src/sandbox/images/image-store.js';
import { overlayDirs } from '../../../../src/sandbox/images/overlay-mount.js';
import { readLease } from '../../../../src/sandbox/lease.js';
import { TaskError } from '../../../../src/errors.js';
import { pidsByCmdline, until } from '../helpers.js';
import { busyboxBashLayer, tarOf, writeOciLayout, type FixtureConfig } from '../../../helpers/images/oci-fixture.js';
import { missingTools } from '../../../helpers/system-tools.js';

// The image config's User and Entrypoint in a real bwrap sandbox (as root: kernel overlayfs and
// the hashed host uid). Env and WorkingDir: image-sandbox.test.ts.
const why = process.getuid?.() !== 0 ? 'needs root (kernel overlayfs)' : missingTools('bwrap', 'busybox');

let dir: string;
let store: ImageStore;
let provider: HostSandboxProvider;

const PASSWD = 'root:x:0:0:root:/root:/bin/sh\nagent:x:1234:2345:Agent:/home/agent:/bin/sh\n';
const GROUP = 'root:x:0:\nagents:x:2345:\nstaff:x:50:\n';

async function failure(p: Promise<unknown>): Promise<TaskError> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(TaskError);
  return err as TaskError;
}

describe.skipIf(why !== null)(`image config in the sandbox${why ? ` (skipped: ${why})` : ''}`, () => {
  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'img-cfg-'));
    fs.chmodSync(dir, 0o711);
    const base = busyboxBashLayer(dir);
    if (!base) throw new Error('busybox is missing: apt-get install busybox-static');
    const etc = tarOf([
      { name: 'etc/', type: '5' },
      { name: 'etc/passwd', content: PASSWD },
      { name: 'etc/group', content: GROUP },
      { name: 'home/', type: '5' },
      { name: 'home/agent/', type: '5' },
      { name: 'root/', type: '5' },
      { name: 'src/', type: '5' },
      // Sets a variable and runs its arguments, as docker-entrypoint.sh scripts do.
      { name: 'entry.sh', content: '#!/bin/sh\nexport ENTRY_RAN="yes $$"\necho "$(date +%s%N)" >> /tmp/entry.log\nexec "$@"\n', mode: 0o755 },
    ]);
    store = new ImageStore(path.join(dir, 'store'));
    const images: Record<string, FixtureConfig> = {
      'cfg-root': { WorkingDir: '/src' },
      'cfg-agent': { User: 'agent', WorkingDir: '/src', Env: ['PATH=/bin'] },
      'cfg-numeric': { User: '4321:staff' },
      'cfg-unknown': { User: 'nobody-here' },
      'cfg-entry': { Entrypoint: ['/entry.sh'], WorkingDir: '/src' },
      'cfg-entry-bad': { Entrypoint: ['/bin/false'] },
    };
    for (const [name, config] of Object.entries(images)) {
      writeOciLayout(path.join(dir, name), [base, etc], config);
      await store.import(path.join(dir, name), { name });
    }
    // No bash at all: only a shell script where bash should be would not do either (not executable).
    writeOciLayout(path.join(dir, 'cfg-no-bash'), [tarOf([{ name: 'bin/', type: '5' }, { name: 'bin/bash', content: '#!/bin/sh\n', mode: 0o644 }, { name: 'etc/', type: '5' }])], {});
    await store.import(path.join(dir, 'cfg-no-bash'), { name: 'cfg-no-bash' });
    provider = createSandboxProvider({ driver: 'bwrap', hosts: 1, stateDir: path.join(dir, 'state'), imageStore: store.dir, timeouts: { bashMs: 10_000, noOutputMs: 10_000, startMs: 15_000 } });
  }, 60_000);

  afterAll(async () => {
    await provider?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it("runs commands as the image's named User: its uid/gid inside, its HOME writable, the workspace its own; the host uid stays the sandbox's", async () => {
    const sb = await provider.create({ image: 'cfg-agent', files: { 'seed.txt': 'x' } }, { rolloutId: 'r-cfg-agent' });
    try {
      const r = await sb.bash({ command: 'id -u; id -g; id -un; echo "$HOME"; touch ~/.gitconfig && echo home-ok; stat -c %u seed.txt; echo made > new.txt; echo x > /etc/passwd 2>&1 || echo etc-refused' });
      expect(r.output.split('\n').slice(0, 4)).toEqual(['1234', '2345', 'agent', '/home/agent']);
      expect(r.output).toContain('home-ok\n1234\n');
      expect(r.output).toContain('etc-refused');
      // On the host the files belong to the sandbox's hashed unprivileged uid, not to 1234.
      const hostPid = readLease(path.join(dir, 'state', 'sandboxes', sb.id))!.hostPid;
      const upper = `/proc/${hostPid}/root${overlayDirs(path.join(dir, 'state', 'sandboxes', sb.id)).upper}`;
      const st = fs.statSync(path.join(upper, 'src', 'new.txt'));
      expect(st.uid).not.toBe(1234);
      expect(st.uid).not.toBe(0);
      expect(fs.statSync(path.join(upper, 'home', 'agent')).uid).toBe(st.uid);
    } finally {
      await sb.close();
    }
  });

  it('a numeric uid with a group name: the uid as given, the group looked up; no passwd entry means HOME=/', async () => {
    const sb = await provider.create({ image: 'cfg-numeric' }, { rolloutId: 'r-cfg-num' });
    try {
      expect((await sb.bash({ command: 'echo "$(id -u) $(id -g) $HOME"' })).output).toBe('4321 50 /\n');
    } finally {
      await sb.close();
    }
  });

  it('no User is root inside the sandbox, without capabilities: image files stay out of reach, HOME is /root', async () => {
    const sb = await provider.create({ image: 'cfg-root' }, { rolloutId: 'r-cfg-root' });
    try {
      const r = await sb.bash({ command: 'id -u; echo "$HOME"; grep -E "^Cap(Eff|Prm|Bnd)" /proc/self/status; echo x > /etc/passwd 2>&1 || echo etc-refused; touch /root/.bashrc && echo home-ok' });
      expect(r.output).toMatch(/^0\n\/root\n/);
      expect(r.output).toMatch(/CapPrm:\s+0+\n/);
      expect(r.output).toMatch(/CapEff:\s+0+\n/);
      expect(r.output).toMatch(/CapBnd:\s+0+\n/);
      expect(r.output).toContain('etc-refused');
      expect(r.output).toContain('home-ok');
    } finally {
      await sb.close();
    }
  });

  it('a User the image does not have is a TaskError IMAGE_USER_UNKNOWN naming the image and the user; nothing is left', async () => {
    const err = await failure(provider.create({ image: 'cfg-unknown' }, { rolloutId: 'r-cfg-unknown' }));
    expect(err.code).toBe('IMAGE_USER_UNKNOWN');
    expect(err.message).toContain("image 'cfg-unknown'");
    expect(err.message).toContain('nobody-here');
    expect(fs.readdirSync(path.join(dir, 'state', 'sandboxes'))).toEqual([]);
  });

  it('the Entrypoint runs the shell once per shell start, as `docker run IMAGE bash` would; commands do not pass through it', async () => {
    const sb = await provider.create({ image: 'cfg-entry' }, { rolloutId: 'r-cfg-entry' });
    try {
      const first = await sb.bash({ command: 'echo "$ENTRY_RAN"; pwd' });
      expect(first.output).toMatch(/^yes \d+\n\/src\n$/);
      await sb.bash({ command: 'true' });
      await sb.bash({ command: 'true' });
      expect((await sb.bash({ command: 'wc -l < /tmp/entry.log' })).output.trim()).toBe('1');
      // The interrupt keeps the shell, found behind the entrypoint.
      const ac = new AbortController();
      const p = sb.bash({ command: `sleep 300.${process.pid}` }, ac.signal);
      const fg = await until(() => pidsByCmdline(['sleep', `300.${process.pid}`])[0]);
      ac.abort();
      await p.catch(() => undefined);
      await until(() => !fs.existsSync(`/proc/${fg}`));
      await sb.bash({ command: '', timeoutMs: 3000 });
      expect((await sb.bash({ command: 'echo alive' })).output).toBe('alive\n');
    } finally {
      await sb.close();
    }
  });

  it('an image without an executable /bin/bash is a TaskError IMAGE_NO_SHELL naming the image, not a retried infra-error (#30); nothing is left', async () => {
    const err = await failure(provider.create({ image: 'cfg-no-bash' }, { rolloutId: 'r-cfg-no-bash' }));
    expect(err.code).toBe('IMAGE_NO_SHELL');
    expect(err.message).toBe("image 'cfg-no-bash' has no executable /bin/bash: sandboxes run the image's bash (add it to the image, e.g. apt-get install bash or apk add bash)");
    expect(fs.readdirSync(path.join(dir, 'state', 'sandboxes'))).toEqual([]);
  });

  it('an Entrypoint that never runs the shell is a TaskError IMAGE_ENTRYPOINT_FAILED naming the image and the entrypoint; nothing is left', async () => {
    const err = await failure(provider.create({ image: 'cfg-entry-bad' }, { rolloutId: 'r-cfg-entry-bad' }));
    expect(err.code).toBe('IMAGE_ENTRYPOINT_FAILED');
    expect(err.message).toContain("image 'cfg-entry-bad'");
    expect(err.message).toContain('/bin/false');
    expect(fs.readdirSync(path.join(dir, 'state', 'sandboxes'))).toEqual([]);
  }, 30_000);
});
