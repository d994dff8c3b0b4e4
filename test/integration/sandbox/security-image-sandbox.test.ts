import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { bwrapWorks, unshareWorks } from '../../../src/sandbox/drivers.js';
import { createSandboxProvider, type HostSandboxProvider } from '../../../src/sandbox/index.js';
import { ImageStore } from '../../../src/sandbox/images/image-store.js';
import { busyboxBashLayer, tarOf, writeOciLayout } from '../../helpers/images/oci-fixture.js';

/**
 * Hostile images at sandbox start and a hostile sandbox afterwards, with a root runtime (issue
 * #28, security 2, 3 and 8): an image's absolute symlinks must resolve in the image's root, never
 * on the host; a sandbox that swaps an ancestor of its workspace for a link must not move the
 * editor's or the next shell's workspace onto the host; the editor has the sandbox user's rights;
 * nothing a sandboxed process can read names the host's state dir or image store.
 */

const why = process.getuid?.() !== 0 ? 'needs root (kernel overlayfs; the attacks are on a root host)' : !bwrapWorks() ? 'needs bwrap (apt-get install bubblewrap)' : null;

let dir: string;
let provider: HostSandboxProvider;
/** Host paths the images' links name, removed in afterAll. */
const hostPaths: string[] = [];
const tag = crypto.randomBytes(4).toString('hex');
/** A host directory `w -> /var/tmp/...` leads to, with a root-only file in it. */
const varTmpTarget = `/var/tmp/rollout-sec-${tag}`;
/** A file in the host's /var/tmp that must never show at /workspace. */
const varTmpMarker = `/var/tmp/rollout-sec-marker-${tag}`;

function stat(p: string): string {
  const st = fs.lstatSync(p);
  return `${st.uid}:${st.gid}:${(st.mode & 0o7777).toString(8)}`;
}

describe.skipIf(why !== null)(`security: hostile images and sandboxes on a root host${why ? ` (skipped: ${why})` : ''}`, () => {
  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sec-sbx-'));
    fs.chmodSync(dir, 0o711);
    const base = busyboxBashLayer(dir);
    if (!base) throw new Error('busybox is missing: apt-get install busybox-static');
    const store = new ImageStore(path.join(dir, 'store'));

    // 2a. WorkingDir below an absolute symlink to a host directory holding a root 0600 file.
    fs.mkdirSync(path.join(varTmpTarget, 'hostroot'), { recursive: true });
    fs.writeFileSync(path.join(varTmpTarget, 'hostroot', 'secret'), 'host secret\n', { mode: 0o600 });
    hostPaths.push(varTmpTarget);
    writeOciLayout(path.join(dir, 'wdlink'), [base, tarOf([{ name: 'w', type: '2', linkname: varTmpTarget }])], { WorkingDir: '/w/hostroot' });
    await store.import(path.join(dir, 'wdlink'), { name: 'wdlink' });

    // 2b. /etc an absolute symlink to a host directory: the host must not write resolv.conf there.
    fs.mkdirSync(path.join(dir, 'host-etc'));
    writeOciLayout(path.join(dir, 'etclink'), [base, tarOf([{ name: 'etc', type: '2', linkname: path.join(dir, 'host-etc') }])], { WorkingDir: '/app' });
    await store.import(path.join(dir, 'etclink'), { name: 'etclink' });

    // 3. WorkingDir two levels below the image user's home, which the sandbox user owns.
    fs.writeFileSync(varTmpMarker, 'host marker\n');
    hostPaths.push(varTmpMarker);
    writeOciLayout(
      path.join(dir, 'swap'),
      [
        base,
        tarOf([
          { name: 'etc/', type: '5' },
          { name: 'etc/passwd', content: 'root:x:0:0:root:/root:/bin/sh\nu:x:1000:1000::/home/u:/bin/sh\n' },
          { name: 'home/', type: '5' },
          { name: 'home/u/', type: '5' },
          { name: 'home/u/work/', type: '5' },
          { name: 'home/u/work/tmp/', type: '5' },
          { name: 'home/u/work/tmp/notes.txt', content: 'image notes\n' },
          { name: 'var/', type: '5' },
          { name: 'var/tmp/', type: '5', mode: 0o1777 },
        ]),
      ],
      { User: 'u', WorkingDir: '/home/u/work/tmp' },
    );
    await store.import(path.join(dir, 'swap'), { name: 'swap' });

    provider = createSandboxProvider({ driver: 'bwrap', hosts: 1, stateDir: path.join(dir, 'state'), imageStore: store.dir, timeouts: { bashMs: 20_000, noOutputMs: 20_000 } });
  }, 120_000);

  afterAll(async () => {
    await provider?.close();
    for (const p of hostPaths) fs.rmSync(p, { recursive: true, force: true });
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it("an image's `w -> /var/tmp/X` with WorkingDir /w/hostroot: resolved in the image's root; the host dir is not chowned, bound or written", async () => {
    const before = stat(path.join(varTmpTarget, 'hostroot', 'secret'));
    expect(before).toBe('0:0:600');
    const sb = await provider.create({ image: 'wdlink', files: { 'seeded.txt': 'seed\n' } }, { rolloutId: 'r-sec-wdlink' });
    try {
      const r = await sb.bash({ command: `pwd; readlink /w; ls -a /workspace; echo made > /workspace/new.txt; cat ${varTmpTarget}/hostroot/new.txt ${varTmpTarget}/hostroot/seeded.txt` });
      expect(r.output).toContain(`/w/hostroot\n${varTmpTarget}\n`);
      expect(r.output).not.toContain('secret');
      // The link resolved inside the image: the workspace is the image's own /var/tmp/... (its upper dir).
      expect(r.output).toContain('made\nseed\n');
      expect(stat(path.join(varTmpTarget, 'hostroot', 'secret'))).toBe(before);
      expect(fs.readdirSync(varTmpTarget)).toEqual(['hostroot']);
      expect(fs.readdirSync(path.join(varTmpTarget, 'hostroot'))).toEqual(['secret']);
      const ed = await sb.editor({ command: 'view', path: '/workspace' });
      expect(ed.output).not.toContain('secret');
    } finally {
      await sb.close();
    }
    expect(stat(varTmpTarget)).toBe('0:0:755');
    expect(fs.readFileSync(path.join(varTmpTarget, 'hostroot', 'secret'), 'utf8')).toBe('host secret\n');
  });

  it("an image's `etc -> /host/dir`: the host writes no resolv.conf (or anything) there", async () => {
    const hostEtc = path.join(dir, 'host-etc');
    const sb = await provider.create({ image: 'etclink', network: false }, { rolloutId: 'r-sec-etclink' });
    try {
      const r = await sb.bash({ command: 'readlink /etc; ls -a /etc/ | tr "\\n" " "; echo; id -u' });
      expect(r.exitCode).toBe(0);
      expect(r.output).toContain(hostEtc);
      expect(fs.readdirSync(hostEtc)).toEqual([]);
    } finally {
      await sb.close();
    }
    expect(fs.readdirSync(hostEtc)).toEqual([]);
  });

  it('`mv work work.old; ln -s /var work` over the workspace: the editor and the next shell stay on the workspace; no host path is created or bound', async () => {
    const planted = `/var/tmp/rollout-sec-planted-${tag}`;
    hostPaths.push(planted);
    const sb = await provider.create({ image: 'swap' }, { rolloutId: 'r-sec-swap' });
    try {
      const swap = await sb.bash({ command: 'cd /home/u && mv work work.old && ln -s /var work && readlink /home/u/work && cd /workspace && ls' });
      expect(swap.exitCode).toBe(0);
      expect(swap.output).toContain('/var\nnotes.txt\n');
      const created = await sb.editor({ command: 'create', path: `/workspace/${path.basename(planted)}`, file_text: 'from the editor\n' });
      expect(created.error).toBe(false);
      expect(fs.existsSync(planted)).toBe(false);
      // Through the WorkingDir's own spelling too (/home/u/work/tmp/... now names /var/tmp inside).
      const viaCwd = await sb.editor({ command: 'create', path: `/home/u/work/tmp/${path.basename(planted)}-2`, file_text: 'x\n' });
      expect(viaCwd.error).toBe(false);
      expect(fs.existsSync(`${planted}-2`)).toBe(false);
      hostPaths.push(`${planted}-2`);
      const view = await sb.editor({ command: 'view', path: '/workspace' });
      expect(view.output).toContain('notes.txt');
      expect(view.output).not.toContain(path.basename(varTmpMarker));
      const read = await sb.bash({ command: `cat /home/u/work.old/tmp/${path.basename(planted)}; stat -c %u /home/u/work.old/tmp/${path.basename(planted)}` });
      expect(read.output).toBe('from the editor\n1000\n');
      // A new shell binds the same directory at /workspace, not what the path now names.
      const exited = await sb.bash({ command: 'exit 3' });
      expect(exited.exitCode).toBe(3);
      const again = await sb.bash({ command: 'ls -a /workspace | tr "\\n" " "' });
      expect(again.output).toContain(path.basename(planted));
      expect(again.output).toContain('notes.txt');
      expect(again.output).not.toContain(path.basename(varTmpMarker));
      expect(fs.readFileSync(varTmpMarker, 'utf8')).toBe('host marker\n');
    } finally {
      await sb.close();
    }
    expect(fs.existsSync(planted)).toBe(false);
  });

  it("the editor has the sandbox user's rights: a chmod-000 file is neither read nor edited, a 0555 directory not written", async () => {
    for (const spec of [{ image: 'swap' }, {}]) {
      const sb = await provider.create(spec, { rolloutId: 'r-sec-perm' });
      try {
        const r = await sb.bash({ command: 'cd /workspace && echo top-secret > s000 && chmod 000 s000 && mkdir ro && chmod 555 ro && cat s000; echo rc=$?' });
        expect(r.output).toMatch(/Permission denied/);
        const view = await sb.editor({ command: 'view', path: '/workspace/s000' });
        expect(view.error).toBe(true);
        expect(view.output).not.toContain('top-secret');
        expect(view.output).toMatch(/permission denied/);
        const edit = await sb.editor({ command: 'str_replace', path: '/workspace/s000', old_str: 'top', new_str: 'low' });
        expect(edit.error).toBe(true);
        const create = await sb.editor({ command: 'create', path: '/workspace/ro/new.txt', file_text: 'x' });
        expect(create.error).toBe(true);
        expect(create.output).toMatch(/permission denied/);
        const after = await sb.bash({ command: 'chmod 600 s000 && cat s000 && ls ro | wc -l' });
        expect(after.output).toBe('top-secret\n0\n');
        // What the user may do, the editor still does.
        expect((await sb.editor({ command: 'str_replace', path: '/workspace/s000', old_str: 'top', new_str: 'low' })).error).toBe(false);
      } finally {
        await sb.close();
      }
    }
  });

  it("no host state-dir or store path in /proc/1/cmdline, /proc/1/environ or mountinfo, in host-root and image sandboxes, for each driver", async () => {
    const unshared = unshareWorks() ? createSandboxProvider({ driver: 'unshare', hosts: 1, stateDir: path.join(dir, 'state-unshare'), imageStore: path.join(dir, 'store'), timeouts: { bashMs: 20_000, noOutputMs: 20_000 } }) : null;
    try {
      for (const [p, spec] of [[provider, {}], [provider, { image: 'swap' }], ...(unshared ? [[unshared, {}]] : [])] as [HostSandboxProvider, { image?: string }][]) {
        const sb = await p.create(spec, { rolloutId: 'r-sec-proc' });
        try {
          const r = await sb.bash({ command: 'tr "\\0" " " </proc/1/cmdline; echo; tr "\\0" "\\n" </proc/1/environ; cat /proc/self/mountinfo /proc/1/mountinfo; readlink /proc/1/cwd; ls -l /proc/self/fd/ /proc/1/fd/ 2>&1' });
          expect(r.exitCode).toBe(0);
          expect(r.output).toContain('/bin/bash');
          expect(r.output).toContain(' /workspace ');
          for (const hidden of [dir, path.join(dir, 'state'), path.join(dir, 'store'), 'sandboxes/', sb.id]) expect(r.output, JSON.stringify(spec)).not.toContain(hidden);
        } finally {
          await sb.close();
        }
      }
    } finally {
      await unshared?.close();
    }
  });
});
