import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { execFileSync } from 'node:child_process';
import { unpackLayer } from '../../../../src/sandbox/images/layer-unpack.js';
import { InfraError, TaskError } from '../../../../src/errors.js';
import { sha256, tarOf, type TarEntry } from '../../../helpers/images/oci-fixture.js';
import { missingTools, skipNote } from '../../../helpers/system-tools.js';

// Whiteouts are written with mknod and Debian's attr (setfattr), read back with getfattr.
const noAttr = missingTools('setfattr', 'getfattr');

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'img-unpack-'));
});
afterEach(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

const where = { image: 'fixture', layer: '1/1 sha256:abc' };

function blob(entries: TarEntry[], gzip = true): { file: string; tar: Buffer } {
  const tar = tarOf(entries);
  const file = path.join(dir, `blob-${Math.random().toString(36).slice(2)}`);
  fs.writeFileSync(file, gzip ? zlib.gzipSync(tar) : tar);
  return { file, tar };
}

async function rejection(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected a rejection');
}

function xattr(p: string, name: string): string | null {
  try {
    return execFileSync('getfattr', ['--only-values', '-n', name, p], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    return null;
  }
}

describe('unpackLayer', () => {
  it('writes files, dirs and symlinks (absolute targets kept as written) and returns the diff_id', async () => {
    const { file, tar } = blob([
      { name: 'etc/', type: '5' },
      { name: 'etc/hello', content: 'hi\n', mode: 0o640 },
      { name: 'usr/bin/', type: '5' },
      { name: 'usr/bin/py', type: '2', linkname: '/usr/bin/python3.11' },
      { name: 'usr/bin/rel', type: '2', linkname: '../../etc/hello' },
      { name: 'etc/hello2', type: '1', linkname: 'etc/hello' },
    ]);
    const dest = path.join(dir, 'out');
    const got = await unpackLayer({ blobPath: file, dest, diffId: sha256(tar), where });
    expect(got.diffId).toBe(sha256(tar));
    expect(fs.readFileSync(path.join(dest, 'etc/hello'), 'utf8')).toBe('hi\n');
    expect(fs.statSync(path.join(dest, 'etc/hello')).mode & 0o777).toBe(0o640);
    expect(fs.readlinkSync(path.join(dest, 'usr/bin/py'))).toBe('/usr/bin/python3.11');
    expect(fs.readlinkSync(path.join(dest, 'usr/bin/rel'))).toBe('../../etc/hello');
    expect(fs.statSync(path.join(dest, 'etc/hello2')).ino).toBe(fs.statSync(path.join(dest, 'etc/hello')).ino);
  });

  it.skipIf(noAttr !== null)(`turns .wh.NAME into a 0:0 character device and .wh..wh..opq into the overlay opaque xattr${skipNote(noAttr)}`, async () => {
    const { file } = blob([
      { name: 'app/', type: '5' },
      { name: 'app/.wh.gone.txt' },
      { name: 'app/old/', type: '5' },
      { name: 'app/old/.wh..wh..opq' },
      { name: 'app/old/fresh.txt', content: 'new' },
    ]);
    const dest = path.join(dir, 'out');
    const got = await unpackLayer({ blobPath: file, dest, where });
    expect(got.whiteouts).toBe(1);
    expect(got.opaqueDirs).toBe(1);
    const st = fs.lstatSync(path.join(dest, 'app/gone.txt'));
    expect(st.isCharacterDevice()).toBe(true);
    expect(st.rdev).toBe(0);
    expect(fs.existsSync(path.join(dest, 'app/.wh.gone.txt'))).toBe(false);
    expect(fs.existsSync(path.join(dest, 'app/old/.wh..wh..opq'))).toBe(false);
    expect(xattr(path.join(dest, 'app/old'), 'trusted.overlay.opaque')).toBe('y');
    expect(fs.readFileSync(path.join(dest, 'app/old/fresh.txt'), 'utf8')).toBe('new');
  });

  const hostile: [string, TarEntry[], RegExp][] = [
    ['a ../ entry', [{ name: '../escape.txt', content: 'x' }], /climbs out of the layer/],
    ['a nested ../ entry', [{ name: 'a/../../escape.txt', content: 'x' }], /climbs out of the layer/],
    ['an absolute entry', [{ name: '/etc/evil', content: 'x' }], /absolute path/],
    ['a symlink climbing out', [{ name: 'lnk', type: '2', linkname: '../../../../etc/passwd' }], /points outside the image root/],
    ['an entry written through a symlink', [{ name: 'lnk', type: '2', linkname: '/etc' }, { name: 'lnk/evil', content: 'x' }], /through the symlink 'lnk'/],
    ['a hard link out', [{ name: 'h', type: '1', linkname: '../../etc/passwd' }], /hard link 'h' points outside/],
    ['a hard link through a symlink', [{ name: 'lnk', type: '2', linkname: '/' }, { name: 'h', type: '1', linkname: 'lnk/etc/passwd' }], /goes through the symlink/],
  ];
  for (const [what, entries, msg] of hostile) {
    it(`refuses ${what} with a TaskError naming image and layer, and leaves nothing behind`, async () => {
      const { file } = blob([{ name: 'ok.txt', content: 'fine' }, ...entries]);
      const dest = path.join(dir, 'out');
      const err = await rejection(unpackLayer({ blobPath: file, dest, where }));
      expect(err).toBeInstanceOf(TaskError);
      expect((err as TaskError).code).toBe('IMAGE_UNSAFE_ENTRY');
      expect(err.message).toMatch(/image 'fixture', layer 1\/1 sha256:abc/);
      expect(err.message).toMatch(msg);
      expect(fs.existsSync(dest)).toBe(false);
      expect(fs.existsSync(path.join(dir, 'escape.txt'))).toBe(false);
    });
  }

  it('a refusal in the middle of a large file closes every fd it opened', async () => {
    const fds = (): number => fs.readdirSync('/proc/self/fd').length;
    const before = fds();
    const { file } = blob([{ name: 'big', content: Buffer.alloc(8 * 1024 * 1024, 1) }, { name: 'dir/', type: '5' }, { name: 'lnk', type: '2', linkname: '/etc' }, { name: 'lnk/x', content: 'x' }], false);
    const err = await rejection(unpackLayer({ blobPath: file, dest: path.join(dir, 'out'), where }));
    expect((err as TaskError).code).toBe('IMAGE_UNSAFE_ENTRY');
    await expect.poll(fds).toBe(before);
  });

  it.skipIf(noAttr !== null)(`a whiteout keeps what its own layer made under that name (a directory becomes opaque), and drops setuid bits and devices${skipNote(noAttr)}`, async () => {
    const { file } = blob([
      { name: 'own/', type: '5' },
      { name: 'own/kept.txt', content: 'mine' },
      { name: '.wh.own' },
      { name: 'f', content: 'file', mode: 0o6755 },
      { name: '.wh.f' },
      { name: 'null0', type: '3', devmajor: 1, devminor: 3, mode: 0o666 },
    ]);
    const dest = path.join(dir, 'out');
    await unpackLayer({ blobPath: file, dest, where });
    expect(fs.readFileSync(path.join(dest, 'own/kept.txt'), 'utf8')).toBe('mine');
    if (process.getuid?.() === 0) expect(xattr(path.join(dest, 'own'), 'trusted.overlay.opaque')).toBe('y');
    expect(fs.statSync(path.join(dest, 'f')).mode & 0o7777).toBe(0o755);
    expect(fs.existsSync(path.join(dest, 'null0'))).toBe(false);
  });

  it('refuses a blob whose digest does not match the manifest', async () => {
    const { file } = blob([{ name: 'a', content: 'x' }]);
    const dest = path.join(dir, 'out');
    const err = await rejection(unpackLayer({ blobPath: file, dest, blobDigest: `sha256:${'0'.repeat(64)}`, where }));
    expect((err as TaskError).code).toBe('IMAGE_DIGEST_MISMATCH');
    expect(err.message).toMatch(/digest mismatch: the manifest says sha256:0{64}, the blob hashes to sha256:[0-9a-f]{64}/);
    expect(fs.existsSync(dest)).toBe(false);
  });

  it('refuses a layer whose uncompressed content does not match its diff_id', async () => {
    const { file } = blob([{ name: 'a', content: 'x' }]);
    const err = await rejection(unpackLayer({ blobPath: file, dest: path.join(dir, 'out'), diffId: `sha256:${'1'.repeat(64)}`, where }));
    expect((err as TaskError).code).toBe('IMAGE_DIGEST_MISMATCH');
    expect(err.message).toMatch(/diff_id mismatch/);
  });

  it('reports a truncated gzip layer as corrupt', async () => {
    const { file } = blob([{ name: 'a', content: 'x'.repeat(100_000) }]);
    const buf = fs.readFileSync(file);
    fs.writeFileSync(file, buf.subarray(0, Math.floor(buf.length / 2)));
    const dest = path.join(dir, 'out');
    const err = await rejection(unpackLayer({ blobPath: file, dest, where }));
    expect(err).toBeInstanceOf(TaskError);
    expect((err as TaskError).code).toBe('IMAGE_CORRUPT');
    expect(fs.existsSync(dest)).toBe(false);
  });

  it('reports garbage that is not a tar archive as corrupt', async () => {
    const file = path.join(dir, 'garbage');
    fs.writeFileSync(file, Buffer.from('this is not a tar archive at all'.repeat(40)));
    const err = await rejection(unpackLayer({ blobPath: file, dest: path.join(dir, 'out'), where }));
    expect((err as TaskError).code).toBe('IMAGE_CORRUPT');
  });

  it('fails a full disk as an InfraError IMAGE_DISK_FULL and removes what it wrote', async (ctx) => {
    if (process.getuid?.() !== 0) return ctx.skip(); // mounting a small tmpfs needs root
    const small = path.join(dir, 'small');
    fs.mkdirSync(small);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=256k', 'tmpfs', small]);
    try {
      const { file } = blob([{ name: 'big', content: Buffer.alloc(2 * 1024 * 1024, 7) }]);
      const dest = path.join(small, 'out');
      const err = await rejection(unpackLayer({ blobPath: file, dest, where }));
      expect(err).toBeInstanceOf(InfraError);
      expect((err as InfraError).code).toBe('IMAGE_DISK_FULL');
      expect(err.message).toMatch(/image 'fixture', layer 1\/1 sha256:abc: no space left on device/);
      expect(fs.readdirSync(small)).toEqual([]);
    } finally {
      execFileSync('umount', [small]);
    }
  });
});
