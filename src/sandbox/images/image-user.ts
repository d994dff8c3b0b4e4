import type { ResolvedImage } from '../../protocol/image.js';
import { readBounded } from '../bounded-read.js';
import { closeQuietly, openFileInRoot } from './root-fs.js';
import { imageTaskError } from './image-errors.js';

/**
 * The image config's `User`, resolved against the image's own /etc/passwd and /etc/group the
 * way Docker does: `name`, `uid`, `name:group`, `uid:gid` (names looked up in the image, numbers
 * taken as they are). The sandbox's commands run as this uid/gid *inside* its user namespace;
 * on the host they stay the sandbox's hashed unprivileged uid (docs/sandboxes.md): the image
 * user is a view, never a host identity.
 */
export interface ImageUser {
  uid: number;
  gid: number;
  /** The user's home from /etc/passwd; `/root` for uid 0 without an entry; else `/` (Docker's default). */
  home: string;
  /** The user name when /etc/passwd has one (for the diagnostics), else the uid as text. */
  name: string;
}

const MAX_ID = 0xfffffffe; // (uid_t)-1 is "no change" to the kernel

interface PasswdEntry { name: string; uid: number; gid: number; home: string }

/** Parses passwd lines (`name:x:uid:gid:gecos:home:shell`), skipping malformed ones. */
export function parsePasswd(text: string): PasswdEntry[] {
  const out: PasswdEntry[] = [];
  for (const line of text.split('\n')) {
    const f = line.split(':');
    if (f.length < 7 || !/^\d+$/.test(f[2]!) || !/^\d+$/.test(f[3]!)) continue;
    out.push({ name: f[0]!, uid: Number(f[2]), gid: Number(f[3]), home: f[5] || '/' });
  }
  return out;
}

/** Parses group lines (`name:x:gid:members`), skipping malformed ones. */
export function parseGroup(text: string): Array<{ name: string; gid: number }> {
  const out: Array<{ name: string; gid: number }> = [];
  for (const line of text.split('\n')) {
    const f = line.split(':');
    if (f.length < 3 || !/^\d+$/.test(f[2]!)) continue;
    out.push({ name: f[0]!, gid: Number(f[2]) });
  }
  return out;
}

/**
 * Resolves `user` (an image config `User`, null or '' for root) given the image's passwd and
 * group files' text (null when the image has none). Pure: the table tests drive it directly.
 * @throws TaskError `IMAGE_USER_UNKNOWN` naming the image and the user or group that is not
 *   there (or is out of range).
 */
export function resolveUser(imageRef: string, user: string | null, passwd: string | null, group: string | null): ImageUser {
  const spec = (user ?? '').trim();
  const [u = '', g] = spec === '' ? ['0'] : spec.split(':', 2);
  const users = parsePasswd(passwd ?? '');
  const fail = (what: string): never => {
    throw imageTaskError('IMAGE_USER_UNKNOWN', { image: imageRef }, `config User ${JSON.stringify(spec)}: ${what}`);
  };
  let entry: PasswdEntry | undefined;
  let uid: number;
  if (/^\d+$/.test(u)) {
    uid = Number(u);
    if (uid > MAX_ID) fail(`uid ${u} is out of range`);
    entry = users.find((e) => e.uid === uid);
  } else {
    if (u === '') fail('empty user name');
    entry = users.find((e) => e.name === u);
    if (!entry) fail(`no user '${u}' in the image's /etc/passwd`);
    uid = entry!.uid;
  }
  let gid = entry?.gid ?? 0;
  if (g !== undefined && g !== '') {
    if (/^\d+$/.test(g)) gid = Number(g);
    else {
      const grp = parseGroup(group ?? '').find((e) => e.name === g);
      if (!grp) fail(`no group '${g}' in the image's /etc/group`);
      gid = grp!.gid;
    }
    if (gid > MAX_ID) fail(`gid ${g} is out of range`);
  }
  const home = entry?.home ?? (uid === 0 ? '/root' : '/');
  return { uid, gid, home: home.startsWith('/') ? home : '/', name: entry?.name ?? String(uid) };
}

/** The largest /etc/passwd or /etc/group read (a hostile image's 10 GB passwd is not). */
const MAX_ID_FILE_BYTES = 4 * 1024 * 1024;

/**
 * Resolves the image's `User` against the files of its mounted root (the directory `rootFd`
 * holds: the sandbox's overlay). The files are found as a chroot would find them, links
 * resolved inside the image's root, never on the host (root-fs.ts); one that is not a regular
 * file counts as absent, and at most 4 MiB of each is read.
 * @throws TaskError `IMAGE_USER_UNKNOWN` (see {@link resolveUser}).
 */
export async function imageUser(rootFd: number, image: ResolvedImage): Promise<ImageUser> {
  const read = async (p: string): Promise<string | null> => {
    const fd = openFileInRoot(rootFd, p);
    if (fd === null) return null;
    try {
      return (await readBounded(fd, MAX_ID_FILE_BYTES)).buf.toString('utf8');
    } catch {
      return null;
    } finally {
      closeQuietly(fd);
    }
  };
  // passwd always: HOME comes from it even for a numeric or empty User.
  const [passwd, group] = await Promise.all([read('/etc/passwd'), image.user?.includes(':') ? read('/etc/group') : Promise.resolve(null)]);
  return resolveUser(image.ref, image.user, passwd, group);
}
