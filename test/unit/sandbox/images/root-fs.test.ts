import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { closeQuietly, DIR_FLAGS, openFileInRoot, openNoSymlinks, resolveInRoot, SymlinkInPathError } from '../../../../src/sandbox/images/root-fs.js';

let dir: string;
let root: string;
let outside: string;
let rootFd: number;

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'root-fs-'));
  root = path.join(dir, 'root');
  outside = path.join(dir, 'outside');
  fs.mkdirSync(path.join(root, 'var', 'tmp'), { recursive: true });
  fs.mkdirSync(outside);
  fs.symlinkSync(outside, path.join(root, 'abs')); // absolute: the host's `outside` on the host, /<outside> inside
  fs.symlinkSync('../../..', path.join(root, 'var', 'up')); // climbs past the root
  fs.symlinkSync('/var/tmp', path.join(root, 'tmp'));
  fs.symlinkSync('loop', path.join(root, 'loop'));
  rootFd = fs.openSync(root, DIR_FLAGS);
});
afterEach(() => {
  closeQuietly(rootFd);
  fs.rmSync(dir, { recursive: true, force: true });
});

function resolved(p: string, mkdirs = false): string {
  const r = resolveInRoot(rootFd, p, { mkdirs });
  closeQuietly(r.fd);
  return r.parts.join('/');
}

describe('resolveInRoot (RESOLVE_IN_ROOT)', () => {
  it.each([
    ['/var/tmp', 'var/tmp'],
    ['tmp', 'var/tmp'],
    ['/var/up/var', 'var'],
    ['../../var/./tmp/..', 'var'],
  ])('resolves %s inside the root as %s', (p, want) => {
    expect(resolved(p)).toBe(want);
  });

  it('an absolute link is followed from the root, and created there with mkdirs: the host directory it names stays empty', () => {
    // (Itself resolved in the root: the root's /tmp is a link to /var/tmp.)
    const got = resolved('/abs/hostroot', true);
    expect(got.endsWith(`${path.basename(dir)}/outside/hostroot`)).toBe(true);
    expect(fs.readdirSync(outside)).toEqual([]);
    expect(fs.lstatSync(path.join(root, got)).isDirectory()).toBe(true);
  });

  it('a missing path is ENOENT without mkdirs; a link loop is ELOOP', () => {
    expect(() => resolveInRoot(rootFd, 'nope/x')).toThrow(expect.objectContaining({ code: 'ENOENT' }));
    expect(() => resolveInRoot(rootFd, 'loop/x')).toThrow(expect.objectContaining({ code: 'ELOOP' }));
  });
});

describe('openNoSymlinks (RESOLVE_NO_SYMLINKS)', () => {
  it('refuses any symlink on the way, naming it, and never creates through one', () => {
    expect(() => openNoSymlinks(rootFd, ['abs', 'x'], { mkdirs: true })).toThrow(SymlinkInPathError);
    expect(() => openNoSymlinks(rootFd, ['var', 'up'])).toThrow(/'var\/up' is a symbolic link/);
    expect(fs.readdirSync(outside)).toEqual([]);
  });

  it('creates missing directories and replaces a file in a directory\'s place, as tar does', () => {
    fs.writeFileSync(path.join(root, 'var', 'file'), 'x');
    closeQuietly(openNoSymlinks(rootFd, ['var', 'file', 'sub'], { mkdirs: true }));
    expect(fs.statSync(path.join(root, 'var', 'file', 'sub')).isDirectory()).toBe(true);
  });
});

describe('openFileInRoot', () => {
  it('follows links of the file itself inside the root (absolute from the root, relative from its directory), never to the host', () => {
    fs.mkdirSync(path.join(root, 'etc'));
    fs.mkdirSync(path.join(root, 'usr', 'share'), { recursive: true });
    fs.writeFileSync(path.join(root, 'usr', 'share', 'passwd.master'), 'image passwd\n');
    fs.symlinkSync('/usr/share/passwd.master', path.join(root, 'etc', 'passwd'));
    fs.symlinkSync('../usr/share/passwd.master', path.join(root, 'etc', 'rel'));
    fs.writeFileSync(path.join(outside, 'hostfile'), 'host\n');
    fs.symlinkSync(path.join(outside, 'hostfile'), path.join(root, 'etc', 'host'));
    const read = (p: string): string | null => {
      const fd = openFileInRoot(rootFd, p);
      if (fd === null) return null;
      try {
        return fs.readFileSync(fd, 'utf8');
      } finally {
        closeQuietly(fd);
      }
    };
    expect(read('/etc/passwd')).toBe('image passwd\n');
    expect(read('etc/rel')).toBe('image passwd\n');
    expect(read('/etc/host')).toBeNull();
    expect(read('/etc')).toBeNull();
    expect(read('/loop')).toBeNull();
  });
});
