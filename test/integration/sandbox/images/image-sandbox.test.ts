import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { unshareWorks } from '../../../../src/sandbox/drivers.js';
import { createSandboxProvider, type HostSandboxProvider } from '../../../../src/sandbox/index.js';
import { ImageStore } from '../../../../src/sandbox/images/image-store.js';
import { isMountPoint, mountOverlay, overlayDirs } from '../../../../src/sandbox/images/overlay-mount.js';
import { reapSandbox, readLease } from '../../../../src/sandbox/lease.js';
import type { WithWarmPools } from '../../../../src/sandbox/warm-pool.js';
import { TaskError } from '../../../../src/errors.js';
import { busyboxBashLayer, tarOf, writeOciLayout } from '../../../helpers/images/oci-fixture.js';
import { until } from '../helpers.js';
import { missingTools } from '../../../helpers/system-tools.js';

// Image sandboxes mount kernel overlayfs on the host (root) and bind it as bwrap's root.
const why = process.getuid?.() !== 0 ? 'needs root (kernel overlayfs)' : missingTools('bwrap', 'busybox');

let dir: string;
let store: ImageStore;
let provider: WithWarmPools<HostSandboxProvider>;
let stateDir: string;

function snapshot(root: string): string[] {
  const out: string[] = [];
  const walk = (rel: string): void => {
    for (const n of fs.readdirSync(path.join(root, rel)).sort()) {
      const r = path.join(rel, n);
      const st = fs.lstatSync(path.join(root, r));
      out.push(`${r}:${st.size}:${st.mtimeMs}`);
      if (st.isDirectory()) walk(r);
    }
  };
  walk('');
  return out;
}

describe.skipIf(why !== null)(`image sandboxes${why ? ` (skipped: ${why})` : ''}`, () => {
  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'img-sbx-'));
    // Sandboxed processes run as an unprivileged uid: the state dir's parents must be searchable.
    fs.chmodSync(dir, 0o711);
    stateDir = path.join(dir, 'state');
    const base = busyboxBashLayer(dir);
    if (!base) throw new Error('busybox is missing: apt-get install busybox-static');
    const top = tarOf([
      { name: 'app/', type: '5' },
      { name: 'app/kept.txt', content: 'kept\n' },
      { name: 'app/.wh.gone.txt' },
      { name: 'etc/', type: '5' },
      { name: 'etc/image-release', content: 'fixture 1\n' },
    ]);
    const layer1 = tarOf([{ name: 'app/', type: '5' }, { name: 'app/gone.txt', content: 'should be hidden\n' }]);
    writeOciLayout(path.join(dir, 'layout'), [base, layer1, top], { Env: ['PATH=/bin', 'IMAGE_FLAVOUR=fixture'], WorkingDir: '/app' });
    store = new ImageStore(path.join(dir, 'store'));
    await store.import(path.join(dir, 'layout'), { name: 'fixture' });
    provider = createSandboxProvider({ driver: 'bwrap', hosts: 1, stateDir, imageStore: store.dir, warmPools: { 'fixture-pooled': 2 }, timeouts: { bashMs: 10_000, noOutputMs: 10_000 } }) as WithWarmPools<HostSandboxProvider>;
    await store.import(path.join(dir, 'layout'), { name: 'fixture-pooled' });
  }, 60_000);

  afterAll(async () => {
    await provider?.close();
    const mounted = fs.readFileSync('/proc/self/mountinfo', 'utf8');
    expect(mounted).not.toContain(dir);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('runs the image: layers merged with whiteouts applied, its Env and WorkingDir honoured, /workspace the same dir', async () => {
    const sb = await provider.create({ image: 'fixture', files: { 'seed.txt': 'seeded' } }, { rolloutId: 'r-img-1' });
    try {
      const r = await sb.bash({ command: 'pwd; cat /etc/image-release kept.txt seed.txt; echo "$IMAGE_FLAVOUR $PATH"; ls /app; test -e /app/gone.txt || echo gone-is-gone; ls /workspace' });
      expect(r.exitCode).toBe(0);
      expect(r.output).toContain('/app\nfixture 1\nkept\nseeded');
      expect(r.output).toContain('fixture /bin');
      expect(r.output).toContain('gone-is-gone');
      expect(r.output).not.toMatch(/gone\.txt/);
      expect(r.cwd).toBe('/app');
      const ed = await sb.editor({ command: 'str_replace', path: '/app/kept.txt', old_str: 'kept', new_str: 'edited' });
      expect(ed.error).toBe(false);
      expect((await sb.bash({ command: 'cat /workspace/kept.txt' })).output).toBe('edited\n');
      expect(await sb.readFile('/app/kept.txt')).toBe('edited\n');
    } finally {
      await sb.close();
    }
  });

  it('writes land in the sandbox upper dir: the cache and other sandboxes never see them; image files stay root\'s', async () => {
    const layers = store.resolve('fixture').lowerDirs;
    const before = layers.map(snapshot);
    const a = await provider.create({ image: 'fixture' }, { rolloutId: 'r-img-a' });
    const b = await provider.create({ image: 'fixture' }, { rolloutId: 'r-img-b' });
    try {
      const w = await a.bash({ command: 'echo mine > /app/kept.txt && echo new > /app/new.txt && cat /app/kept.txt; echo x > /etc/image-release' });
      expect(w.output).toContain('mine\n');
      // The sandbox runs as an unprivileged uid: it owns its working dir, not the image's files.
      expect(w.output).toMatch(/image-release: Permission denied/);
      const r = await b.bash({ command: 'cat /etc/image-release /app/kept.txt; ls /app/new.txt 2>&1 || true' });
      expect(r.output).toContain('fixture 1\nkept\n');
      expect(r.output).toMatch(/No such file/);
    } finally {
      await a.close();
      await b.close();
    }
    expect(layers.map(snapshot)).toEqual(before);
  });

  it('close unmounts the overlay and removes the upper dir', async () => {
    const sb = await provider.create({ image: 'fixture' }, { rolloutId: 'r-img-close' });
    const sdir = path.join(stateDir, 'sandboxes', sb.id);
    const { merged, upper } = overlayDirs(sdir);
    // The overlay lives in the sandbox host's private mount namespace: look through its /proc.
    const hostPid = readLease(sdir)!.hostPid;
    const mounts = (): string => fs.readFileSync(`/proc/${hostPid}/mountinfo`, 'utf8');
    expect(mounts()).toContain(` ${merged} `);
    await sb.bash({ command: 'echo x > /app/written-file' });
    expect(fs.existsSync(`/proc/${hostPid}/root${upper}/app/written-file`)).toBe(true);
    await sb.close();
    expect(mounts()).not.toContain(sdir);
    expect(fs.existsSync(sdir)).toBe(false);
  });

  it('the reaper unmounts a dead sandbox overlay before removing its directory', async () => {
    const sdir = path.join(stateDir, 'sandboxes', 'sb-orphan-overlay');
    fs.mkdirSync(sdir, { recursive: true });
    await mountOverlay(store.resolve('fixture').lowerDirs, overlayDirs(sdir));
    fs.writeFileSync(path.join(overlayDirs(sdir).merged, 'etc', 'written'), 'x');
    expect(readLease(sdir)).toBeNull();
    await reapSandbox(sdir);
    expect(isMountPoint(overlayDirs(sdir).merged)).toBe(false);
    expect(fs.existsSync(sdir)).toBe(false);
    // The lower layers were not walked by the removal.
    expect(fs.readFileSync(path.join(store.resolve('fixture').lowerDirs[0]!, 'etc', 'image-release'), 'utf8')).toBe('fixture 1\n');
  });

  it.runIf(unshareWorks())('the unshare driver filters and drops an image without python3 (busybox and bash only) as any other', async () => {
    const unshared = createSandboxProvider({ driver: 'unshare', hosts: 1, stateDir: path.join(dir, 'state-unshare'), imageStore: store.dir, timeouts: { bashMs: 10_000, noOutputMs: 10_000 } });
    try {
      const sb = await unshared.create({ image: 'fixture' }, { rolloutId: 'r-img-unshare' });
      const r = await sb.bash({ command: "command -v python3 || echo no-python; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status; echo \"$PATH\"" });
      expect(r.output).toMatch(/^no-python\n/);
      const f = Object.fromEntries(r.output.trim().split('\n').slice(1, -1).map((l) => l.split(/:\s+/) as [string, string]));
      for (const c of ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb']) expect(f[c], c).toBe('0000000000000000');
      expect([f.NoNewPrivs, f.Seccomp]).toEqual(['1', '2']);
      expect(r.output.trim().split('\n').at(-1)).toBe('/bin');
      await sb.close();
    } finally {
      await unshared.close();
    }
  });

  it('a missing image is a TaskError IMAGE_NOT_FOUND naming it, and starts nothing', async () => {
    const err = await provider.create({ image: 'no-such-image:v1' }, { rolloutId: 'r-img-missing' }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(TaskError);
    expect((err as TaskError).code).toBe('IMAGE_NOT_FOUND');
    expect((err as Error).message).toContain("image 'no-such-image:v1'");
  });

  it('a warm pool keeps K sandboxes started, hands each out once and refills', async () => {
    const spec = { image: 'fixture-pooled', env: { POOL: '1' } };
    const first = await provider.create(spec, { rolloutId: 'r-pool-0' }); // cold: starts the pool
    const stats = () => provider.warmPoolStats().find((s) => s.image === 'fixture-pooled')!;
    await until(() => stats().ready === 2, 50);
    const a = await provider.create(spec, { rolloutId: 'r-pool-1' });
    // Handed out of the pool, not started for the call (its speed is bench/images.ts's figure):
    // a hit, one fewer ready, its replacement only starting (a start takes an IPC round trip).
    expect(stats()).toMatchObject({ hits: 1, ready: 1 });
    const b = await provider.create(spec, { rolloutId: 'r-pool-2' });
    expect(a.id).not.toBe(b.id);
    expect(stats().hits).toBe(2);
    await a.bash({ command: 'echo used > /app/used' });
    expect((await b.bash({ command: 'cat /app/used 2>&1; echo $POOL' })).output).toMatch(/No such file[\s\S]*1\n$/);
    await until(() => stats().ready === 2, 50); // refilled in the background
    const c = await provider.create({ ...spec, env: { POOL: '2' } }, { rolloutId: 'r-pool-3' }); // another spec: its own pool
    await Promise.all([first.close(), a.close(), b.close(), c.close()]);
  }, 60_000);
});
