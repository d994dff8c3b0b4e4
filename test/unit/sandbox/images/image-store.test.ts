import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { defaultImageStoreDir, ImageStore } from '../../../../src/sandbox/images/image-store.js';
import { InfraError, TaskError } from '../../../../src/errors.js';
import { tarOf, writeDockerArchive, writeOciLayout } from '../../../helpers/images/oci-fixture.js';
import { execFileSync } from 'node:child_process';

let dir: string;
let store: ImageStore;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'img-store-'));
  store = new ImageStore(path.join(dir, 'store'));
});
/**
 * Unmounts `dir`, waiting out EBUSY for a bounded time: node-tar's write stream that hit ENOSPC
 * closes its fd a moment after the unpack has already failed (and its files are gone), and under
 * a loaded run that moment can outlast the test's own cleanup.
 */
async function umountWhenFree(dir: string): Promise<void> {
  for (let i = 0; ; i++) {
    try {
      execFileSync('umount', [dir], { stdio: 'pipe' });
      return;
    } catch (err) {
      if (i >= 100 || !/busy/.test(String((err as { stderr?: Buffer }).stderr ?? err))) throw err;
      // The poll step of a bounded wait for node-tar's fd to close (no event tells it), not synchronisation.
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}

afterEach(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

const base = tarOf([{ name: 'etc/', type: '5' }, { name: 'etc/os', content: 'fixture\n' }, { name: 'app/', type: '5' }, { name: 'app/gone.txt', content: 'x' }]);
const top = tarOf([{ name: 'app/', type: '5' }, { name: 'app/.wh.gone.txt' }, { name: 'app/new.txt', content: 'y' }]);

async function rejection(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected a rejection');
}

function leftovers(): string[] {
  const out: string[] = [];
  for (const d of ['tmp', 'locks']) {
    try {
      out.push(...fs.readdirSync(path.join(store.dir, d)).map((f) => `${d}/${f}`));
    } catch {
      // not made
    }
  }
  return out;
}

describe('ImageStore', () => {
  it('imports an OCI layout: one directory per layer keyed by diff_id, config kept, resolve gives lower dirs top first', async () => {
    const layout = path.join(dir, 'layout');
    const d = writeOciLayout(layout, [base, top], { Env: ['PATH=/bin', 'A=b=c'], WorkingDir: '/app', User: '0', Entrypoint: ['/bin/sh'] });
    const rec = await store.import(layout, { name: 'fixture' });
    expect(rec.id).toBe(d.config);
    expect(rec.layers).toEqual(d.diffIds);
    const r = store.resolve('fixture');
    expect(r.lowerDirs).toEqual([store.layerDir(d.diffIds[1]!), store.layerDir(d.diffIds[0]!)]);
    expect(r.env).toEqual({ PATH: '/bin', A: 'b=c' });
    expect(r.workingDir).toBe('/app');
    expect(r.entrypoint).toEqual(['/bin/sh']);
    expect(fs.lstatSync(path.join(r.lowerDirs[0]!, 'app/gone.txt')).isCharacterDevice()).toBe(true);
    expect(store.resolve(d.config).id).toBe(d.config);
    expect(store.resolve(d.config.slice(7, 19)).id).toBe(d.config);
    expect(leftovers()).toEqual([]);
  });

  it('imports a docker-archive tarball under its RepoTags name, found also with docker.io/ and :latest forms', async () => {
    const file = path.join(dir, 'image.tar');
    const id = writeDockerArchive(file, [base, top], { WorkingDir: '/app' }, 'swebench/sweb.eval.x86_64.demo:latest');
    const rec = await store.import(file);
    expect(rec.id).toBe(id);
    expect(rec.names).toEqual(['swebench/sweb.eval.x86_64.demo:latest']);
    expect(store.has('docker.io/swebench/sweb.eval.x86_64.demo')).toBe(true);
    expect(store.has('swebench/sweb.eval.x86_64.demo')).toBe(true);
    expect(leftovers()).toEqual([]);
  });

  it('unpacks a layer shared by two images once, and concurrent imports of one image do the work once', async () => {
    const a = path.join(dir, 'a');
    const b = path.join(dir, 'b');
    writeOciLayout(a, [base, top]);
    writeOciLayout(b, [base, tarOf([{ name: 'other', content: 'z' }])]);
    const [r1, r2, r3] = await Promise.all([store.import(a, { name: 'a1' }), store.import(a, { name: 'a2' }), store.import(b, { name: 'b' })]);
    expect(r1.id).toBe(r2.id);
    expect(r3.layers[0]).toBe(r1.layers[0]);
    expect(fs.readdirSync(path.join(store.dir, 'layers')).filter((n) => !n.endsWith('.json'))).toHaveLength(3);
    expect(store.list().find((x) => x.id === r1.id)!.names.sort()).toEqual(['a1', 'a2']);
    expect(leftovers()).toEqual([]);
  });

  it('a missing image is a TaskError IMAGE_NOT_FOUND naming it and the store', () => {
    let err: unknown;
    try {
      store.resolve('no-such-image');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TaskError);
    expect((err as TaskError).code).toBe('IMAGE_NOT_FOUND');
    expect((err as Error).message).toContain("image 'no-such-image'");
    expect((err as Error).message).toContain(store.dir);
  });

  it('a missing path, a corrupt tarball and a tampered layer blob fail with clear errors and leave no layer or temp dir', async () => {
    const missing = await rejection(store.import(path.join(dir, 'nope')));
    expect((missing as TaskError).code).toBe('IMAGE_NOT_FOUND');
    const junk = path.join(dir, 'junk.tar');
    fs.writeFileSync(junk, 'not a tarball at all, just text'.repeat(50));
    const corrupt = await rejection(store.import(junk, { name: 'junk' }));
    expect(corrupt).toBeInstanceOf(TaskError);
    expect((corrupt as TaskError).code).toBe('IMAGE_CORRUPT');
    expect(corrupt.message).toContain(junk);

    const layout = path.join(dir, 'layout');
    const d = writeOciLayout(layout, [base, top]);
    const blob = path.join(layout, 'blobs', 'sha256', d.layers[1]!.slice(7));
    const bytes = fs.readFileSync(blob);
    bytes[bytes.length - 5] = bytes[bytes.length - 5]! ^ 0xff;
    fs.writeFileSync(blob, bytes);
    const bad = await rejection(store.import(layout, { name: 'tampered' }));
    expect((bad as TaskError).code).toMatch(/IMAGE_DIGEST_MISMATCH|IMAGE_CORRUPT/);
    expect(bad.message).toContain(`image 'tampered', layer 2/2 ${d.diffIds[1]}`);
    expect(fs.existsSync(store.layerDir(d.diffIds[1]!))).toBe(false);
    expect(store.has('tampered')).toBe(false);
    expect(leftovers()).toEqual([]);
  });

  it('a layer with a path-traversal entry fails the import naming image and layer (IMAGE_UNSAFE_ENTRY); that layer and the image are not stored', async () => {
    const evil = tarOf([{ name: 'ok.txt', content: 'x' }, { name: '../../escape.txt', content: 'owned' }]);
    const d = writeOciLayout(path.join(dir, 'evil'), [base, evil]);
    const err = await rejection(store.import(path.join(dir, 'evil'), { name: 'evil' }));
    expect(err).toBeInstanceOf(TaskError);
    expect((err as TaskError).code).toBe('IMAGE_UNSAFE_ENTRY');
    expect(err.message).toContain(`image 'evil', layer 2/2 ${d.diffIds[1]}`);
    expect(err.message).toMatch(/climbs out of the layer/);
    expect(fs.existsSync(store.layerDir(d.diffIds[1]!))).toBe(false);
    expect(store.has('evil')).toBe(false);
    expect(leftovers()).toEqual([]);
    expect(fs.existsSync(path.join(store.dir, 'escape.txt'))).toBe(false);
    expect(fs.existsSync(path.join(dir, 'escape.txt'))).toBe(false);
  });

  it('a config blob that does not match its descriptor is IMAGE_DIGEST_MISMATCH naming the image; nothing is stored', async () => {
    const layout = path.join(dir, 'cfg-tampered');
    const d = writeOciLayout(layout, [base]);
    const cfg = path.join(layout, 'blobs', 'sha256', d.config.slice(7));
    fs.writeFileSync(cfg, fs.readFileSync(cfg, 'utf8').replace('"amd64"', '"arm64"'));
    const err = await rejection(store.import(layout, { name: 'cfg-tampered' }));
    expect((err as TaskError).code).toBe('IMAGE_DIGEST_MISMATCH');
    // Before its config is read, an image is named by the path it is imported from.
    expect(err.message).toContain(`image '${layout}': config digest mismatch: the manifest says ${d.config}`);
    expect(store.has('cfg-tampered')).toBe(false);
    expect(fs.readdirSync(path.join(store.dir, 'layers'), { withFileTypes: true }).filter((e) => e.isDirectory())).toEqual([]);
    expect(leftovers()).toEqual([]);
  });

  it('a docker-archive whose manifest.json names a layer outside the archive is IMAGE_UNSAFE_ENTRY; nothing is stored', async () => {
    const file = path.join(dir, 'escape.tar');
    writeDockerArchive(file, [base]);
    // Rewrite manifest.json inside the archive to point a layer at ../../ (tar's own tools).
    const x = path.join(dir, 'x');
    fs.mkdirSync(x);
    execFileSync('tar', ['-xf', file, '-C', x]);
    const m = JSON.parse(fs.readFileSync(path.join(x, 'manifest.json'), 'utf8')) as Array<{ Layers: string[] }>;
    m[0]!.Layers = ['../../../etc/passwd'];
    fs.writeFileSync(path.join(x, 'manifest.json'), JSON.stringify(m));
    execFileSync('tar', ['-cf', file, '-C', x, '.']);
    const err = await rejection(store.import(file, { name: 'escape' }));
    expect((err as TaskError).code).toBe('IMAGE_UNSAFE_ENTRY');
    expect(err.message).toContain(`image '${file}'`);
    expect(err.message).toContain('outside the archive');
    expect(store.has('escape')).toBe(false);
    expect(leftovers()).toEqual([]);
  });

  it('rm forgets a name; the record goes with its last name; prune drops least recently used images and unnamed layers', async () => {
    const a = path.join(dir, 'a');
    const b = path.join(dir, 'b');
    writeOciLayout(a, [tarOf([{ name: 'a', content: 'x'.repeat(5000) }])]);
    writeOciLayout(b, [tarOf([{ name: 'b', content: 'y'.repeat(5000) }])]);
    await store.import(a, { name: 'old' });
    await store.import(b, { name: 'new' });
    // `old` was last used long ago.
    const oldId = store.lookup('old')!;
    const past = new Date(Date.now() - 86_400_000);
    fs.utimesSync(path.join(store.dir, 'used', oldId.slice(7)), past, past);
    const report = store.prune({ maxBytes: 6000 });
    expect(report.images).toEqual(['old']);
    expect(report.layers).toHaveLength(1);
    expect(store.has('old')).toBe(false);
    expect(store.has('new')).toBe(true);
    expect(store.remove('new')).toBe(true);
    expect(store.remove('new')).toBe(false);
    expect(store.list()).toEqual([]);
    expect(store.prune().layers).toHaveLength(1);
    expect(fs.readdirSync(path.join(store.dir, 'layers'))).toEqual([]);
  });

  it('a full disk during import is an InfraError IMAGE_DISK_FULL naming image and layer, with nothing half-written', async (ctx) => {
    if (process.getuid?.() !== 0) return ctx.skip(); // mounting a small tmpfs needs root
    const small = path.join(dir, 'small');
    fs.mkdirSync(small);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=512k', 'tmpfs', small]);
    try {
      const s = new ImageStore(path.join(small, 'store'));
      const layout = path.join(dir, 'big');
      const d = writeOciLayout(layout, [tarOf([{ name: 'big', content: Buffer.alloc(3 * 1024 * 1024, 1) }])]);
      const err = await rejection(s.import(layout, { name: 'big' }));
      expect(err).toBeInstanceOf(InfraError);
      expect((err as InfraError).code).toBe('IMAGE_DISK_FULL');
      expect(err.message).toContain(`image 'big', layer 1/1 ${d.diffIds[0]}`);
      expect(fs.readdirSync(path.join(s.dir, 'layers'))).toEqual([]);
      expect(fs.readdirSync(path.join(s.dir, 'tmp'))).toEqual([]);
      expect(s.has('big')).toBe(false);
    } finally {
      await umountWhenFree(small);
    }
  });

  it('defaults to ROLLOUT_IMAGE_STORE, else XDG_CACHE_HOME, else ~/.cache', () => {
    expect(defaultImageStoreDir({ ROLLOUT_IMAGE_STORE: '/x/y' })).toBe('/x/y');
    expect(defaultImageStoreDir({ XDG_CACHE_HOME: '/c' })).toBe('/c/rollout-runtime/images');
    expect(defaultImageStoreDir({})).toBe(path.join(os.homedir(), '.cache', 'rollout-runtime', 'images'));
  });
});
