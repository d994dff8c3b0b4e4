import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync, spawnSync } from 'node:child_process';
import { ImageStore } from '../../../src/sandbox/images/image-store.js';
import { TaskError } from '../../../src/errors.js';
import { tarOf, writeOciLayout, type TarEntry } from '../../helpers/images/oci-fixture.js';

/**
 * A hostile image imported by root must not touch the host (issue #28, security 1 and 6): layer
 * entries listed BEFORE the symlink they pass through (a whiteout, an opaque marker, a device, a
 * FIFO, a file), setuid files and device nodes. Each case checks the host directory the links
 * point at afterwards: nothing removed, created, or marked with an xattr.
 */

const why = process.getuid?.() !== 0 ? 'needs root (the attack is root writing the host)' : spawnSync('setfattr', ['--version']).status !== 0 ? 'needs setfattr (apt-get install attr)' : null;

let dir: string;
let host: string;

/** Every entry under `root` with its type, mode, owner, size and content digest: what "unchanged" means. */
function snapshot(root: string): string[] {
  const out: string[] = [];
  const walk = (rel: string): void => {
    for (const n of fs.readdirSync(path.join(root, rel)).sort()) {
      const r = path.join(rel, n);
      const st = fs.lstatSync(path.join(root, r));
      out.push(`${r}:${st.mode.toString(8)}:${st.uid}:${st.rdev}:${st.size}:${st.isFile() ? fs.readFileSync(path.join(root, r), 'utf8') : ''}`);
      if (st.isDirectory()) walk(r);
    }
  };
  walk('');
  return out;
}

function xattrs(p: string): string {
  return execFileSync('getfattr', ['-d', '-m', '-', '--absolute-names', p], { encoding: 'utf8' });
}

async function importRejected(name: string, layer: TarEntry[]): Promise<TaskError> {
  const layout = path.join(dir, `layout-${name}`);
  writeOciLayout(layout, [tarOf(layer)]);
  const store = new ImageStore(path.join(dir, `store-${name}`));
  try {
    await store.import(layout, { name });
  } catch (err) {
    expect(err).toBeInstanceOf(TaskError);
    return err as TaskError;
  }
  throw new Error('the import was expected to fail');
}

describe.skipIf(why !== null)(`security: hostile layers imported as root${why ? ` (skipped: ${why})` : ''}`, () => {
  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sec-import-'));
    // The host directory the layers' symlinks name: a tree to delete, a dir to mark.
    host = path.join(dir, 'host');
    fs.mkdirSync(path.join(host, 'victim', 'deep'), { recursive: true });
    fs.writeFileSync(path.join(host, 'victim', 'keep.txt'), 'host data\n');
    fs.writeFileSync(path.join(host, 'victim', 'deep', 'more.txt'), 'more host data\n');
  });

  afterAll(() => {
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const cases: [string, (h: string) => TarEntry[]][] = [
    ['a whiteout listed before the symlink its directory is', (h) => [{ name: 'x/.wh.victim' }, { name: 'x', type: '2', linkname: h }]],
    ['an opaque marker listed before the symlink its directory is', (h) => [{ name: 'y/.wh..wh..opq' }, { name: 'y', type: '2', linkname: h }]],
    ['a FIFO listed before the symlink its directory is', (h) => [{ name: 'q/fifo', type: '6', mode: 0o666 }, { name: 'q', type: '2', linkname: h }]],
    ['a whiteout two levels under a symlink made later', (h) => [{ name: 'a/victim/.wh.keep.txt' }, { name: 'a', type: '2', linkname: h }]],
  ];
  for (const [what, layer] of cases) {
    it(`${what}: the import is refused and the host directory is untouched (no file removed or made, no xattr)`, async () => {
      const before = snapshot(host);
      const xBefore = xattrs(host);
      const err = await importRejected(what.replace(/\W+/g, '-'), [{ name: 'ok.txt', content: 'fine' }, ...layer(host)]);
      expect(err.code).toBe('IMAGE_UNSAFE_ENTRY');
      expect(err.message).toMatch(/through the symlink/);
      expect(snapshot(host)).toEqual(before);
      expect(xattrs(host)).toBe(xBefore);
      expect(xattrs(host)).not.toMatch(/overlay\.opaque/);
    });
  }

  it('a device node listed before the symlink its directory is: never made, in the layer or on the host', async () => {
    const before = snapshot(host);
    const layout = path.join(dir, 'layout-dev');
    writeOciLayout(layout, [tarOf([{ name: 'z/evil', type: '3', devmajor: 1, devminor: 3, mode: 0o666 }, { name: 'z', type: '2', linkname: host }])]);
    const store = new ImageStore(path.join(dir, 'store-dev'));
    await store.import(layout, { name: 'dev' });
    expect(snapshot(host)).toEqual(before);
    expect(fs.existsSync(path.join(host, 'evil'))).toBe(false);
    expect(fs.readlinkSync(path.join(store.resolve('dev').lowerDirs[0]!, 'z'))).toBe(host);
  });

  it('a file, a directory and a hard link under a symlink of the same layer are refused whatever their spelling', async () => {
    const before = snapshot(host);
    for (const [i, bad] of ([[{ name: './l/planted', content: 'x' }], [{ name: 'l/newdir/', type: '5' }], [{ name: 'ok2.txt', content: 'y' }, { name: 'l/hl', type: '1', linkname: 'ok2.txt' }]] as TarEntry[][]).entries()) {
      const err = await importRejected(`through-link-${i}`, [{ name: 'l', type: '2', linkname: host }, ...bad]);
      expect(err.code).toBe('IMAGE_UNSAFE_ENTRY');
    }
    expect(snapshot(host)).toEqual(before);
  });

  it('a whiteout of a real directory in the layer still becomes a 0:0 device there, and only there', async () => {
    const layout = path.join(dir, 'layout-fine');
    writeOciLayout(layout, [tarOf([{ name: 'x/.wh.victim' }, { name: 'x/', type: '5' }, { name: 'y/.wh..wh..opq' }])]);
    const store = new ImageStore(path.join(dir, 'store-fine'));
    await store.import(layout, { name: 'fine' });
    const layerDir = store.resolve('fine').lowerDirs[0]!;
    const st = fs.lstatSync(path.join(layerDir, 'x', 'victim'));
    expect(st.isCharacterDevice() && st.rdev === 0).toBe(true);
    expect(xattrs(path.join(layerDir, 'y'))).toMatch(/trusted\.overlay\.opaque="y"/);
    expect(fs.existsSync(path.join(host, 'victim', 'keep.txt'))).toBe(true);
  });

  it("setuid/setgid bits are dropped and device nodes not made; the store is 0700: 'nobody' cannot run a layer's setuid-root shell as euid 0", async () => {
    // A store where an operator put it, under a directory everyone may traverse (--image-store).
    const open = path.join(dir, 'shared');
    fs.mkdirSync(open, { mode: 0o755 });
    fs.chmodSync(dir, 0o755);
    const storeDir = path.join(open, 'store');
    // Made before by hand, or by an earlier version, 0755: the next import takes others' access off.
    fs.mkdirSync(storeDir, { mode: 0o755 });
    const bash = fs.readFileSync(fs.realpathSync('/bin/bash'));
    const layout = path.join(dir, 'layout-suid');
    writeOciLayout(layout, [
      tarOf([
        { name: 'bin/', type: '5' },
        { name: 'bin/suid-sh', content: bash, mode: 0o4755, uid: 0, gid: 0 },
        { name: 'bin/sgid-sh', content: bash, mode: 0o2755, uid: 0, gid: 0 },
        { name: 'shared/', type: '5', mode: 0o3777 },
        { name: 'dev/', type: '5' },
        { name: 'dev/mem0', type: '3', devmajor: 1, devminor: 1, mode: 0o666 },
        { name: 'dev/sda0', type: '4', devmajor: 8, devminor: 0, mode: 0o666 },
      ]),
    ]);
    const store = new ImageStore(storeDir);
    await store.import(layout, { name: 'suid' });
    const layerDir = store.resolve('suid').lowerDirs[0]!;

    expect(fs.statSync(storeDir).mode & 0o077).toBe(0);
    for (const d of ['layers', 'images', 'refs', 'tmp']) expect(fs.statSync(path.join(storeDir, d)).mode & 0o077).toBe(0);
    expect(fs.statSync(path.join(layerDir, 'bin', 'suid-sh')).mode & 0o7777).toBe(0o755);
    expect(fs.statSync(path.join(layerDir, 'bin', 'sgid-sh')).mode & 0o7777).toBe(0o755);
    // A directory keeps sticky and setgid (group inheritance, no one's rights).
    expect(fs.statSync(path.join(layerDir, 'shared')).mode & 0o7777).toBe(0o3777);
    expect(fs.readdirSync(path.join(layerDir, 'dev'))).toEqual([]);

    // As nobody: the store cannot be walked, and the shell (were it reached) runs as nobody.
    const asNobody = (p: string): { status: number | null; out: string } => {
      // Through sh: the exec is then looked up as nobody (setpriv's own exec of its argument is not a fair test).
      const r = spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', '--', '/bin/sh', '-c', 'exec "$0" -p -c \'echo "euid=$EUID"\'', p], { encoding: 'utf8' });
      return { status: r.status, out: r.stdout };
    };
    const viaStore = asNobody(path.join(layerDir, 'bin', 'suid-sh'));
    expect(viaStore.out).not.toContain('euid=0');
    expect(viaStore.status).not.toBe(0);
    // Even copied out of the store (the 0700 aside), the file carries no setuid bit.
    const copy = path.join(open, 'copied-sh');
    fs.copyFileSync(path.join(layerDir, 'bin', 'suid-sh'), copy);
    fs.chmodSync(copy, fs.statSync(path.join(layerDir, 'bin', 'suid-sh')).mode & 0o7777);
    expect(asNobody(copy).out).toBe('euid=65534\n');
  });
});
