import fs from 'node:fs';
import path from 'node:path';
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { SandboxError } from '../errors.js';
import { TRUSTED_PATH } from './drivers.js';

/** One mount a fork makes (host-fork.ts): a snapshot's bind, or a branch's workspace overlay. */
export type MountOp =
  /** `mount --bind src dst` (no path canonicalisation: `src` may be a /proc fd link). */
  | { op: 'bind'; src: string; dst: string }
  /**
   * A fork branch's root (branch-fs.ts `prepareBranches`): a tmpfs (options `data`, nosuid,
   * nodev) on `root`, made propagation-shared, holding `upper`, `workspace`, `ctl`, `home`,
   * `root` (mode 755) and the FIFO `ctl/<gate>` (mode 644).
   */
  | { op: 'root'; root: string; data: string; gate: string }
  /** In branch root `root`: the overlay of lower dirs `lower` (links in the root, `l0:l1…`) on `workspace`, upper `upper`, work dir `ovl-work`. */
  | { op: 'overlay'; root: string; lower: string };

/**
 * mount(2) by ctypes, one JSON array of {@link MountOp} per stdin line, `ok` or `err <why>` per
 * stdout line. Dies with the host (PR_SET_PDEATHSIG), and at stdin's end.
 */
const SCRIPT = `
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(1, 9, 0, 0, 0)
os.umask(0)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
def mnt(src, tgt, fstype, flags, data):
    if libc.mount(src and src.encode(), tgt.encode(), fstype and fstype.encode(), flags, data and data.encode()) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), tgt)
for line in sys.stdin:
    try:
        for o in json.loads(line):
            if o['op'] == 'bind':
                mnt(o['src'], o['dst'], None, 4096, None)
            elif o['op'] == 'root':
                r = o['root']
                mnt('rollout-sandbox', r, 'tmpfs', 2 | 4, o['data'])
                mnt(None, r, None, 1 << 20, None)
                for d in ('upper', 'workspace', 'ctl', 'home', 'root'):
                    os.mkdir(os.path.join(r, d), 0o755)
                os.mkfifo(os.path.join(r, 'ctl', o['gate']), 0o644)
            else:
                os.chdir(o['root'])
                mnt('overlay', 'workspace', 'overlay', 0, 'lowerdir=%s,upperdir=upper,workdir=ovl-work,index=off,xino=off' % o['lower'])
        out = 'ok'
    except Exception as e:
        out = 'err ' + str(e).replace('\\n', ' ')
    os.chdir('/')
    sys.stdout.write(out + '\\n')
    sys.stdout.flush()
`;

/**
 * A root helper process of the sandbox host that makes a fork's mounts itself (mount(2) through
 * python3's ctypes), so a fork's snapshot bind, its branches' roots and their overlays cost a
 * line on a pipe instead of a fork and exec of `mount` (and `bash`, `mkdir`, `mkfifo`) each: on a
 * loaded machine those spawns were ~15 ms for the bind and ~20-60 ms for the overlays of K = 4
 * branches, on a warm fork's path (bench/fork.ts), and 16-32 ms for the roots on a cold one.
 * Started on first use, in the host's own mount namespace (its child), one request at a time.
 * Without a trusted python3 {@link run} returns false and the caller spawns `mount` as before.
 *
 * Close path: {@link close} (the host's exit) ends its stdin; it also dies with the host.
 */
export class Mounter {
  private proc: ChildProcessWithoutNullStreams | null = null;
  private readonly waiting: Array<(line: string) => void> = [];
  private buf = '';
  private closed = false;
  private readonly python: string | null = TRUSTED_PATH.split(':').map((d) => path.join(d, 'python3')).find((p) => fs.existsSync(p)) ?? null;

  /** Starts the helper ahead of its first use (a fork's path should not pay python's start). */
  warm(): void {
    if (this.python && !this.closed && !this.proc) this.start(this.python);
  }

  /**
   * Makes `ops` in order. Resolves false when there is no helper (no python3, or closed): nothing
   * was done. @throws SandboxError `FORK_FAILED` naming `what` when a mount fails (those before it stand).
   */
  async run(ops: MountOp[], what: string): Promise<boolean> {
    if (!this.python || this.closed) return false;
    const proc = this.proc ?? this.start(this.python);
    const line = await new Promise<string>((resolve) => {
      this.waiting.push(resolve);
      proc.stdin.write(`${JSON.stringify(ops)}\n`);
    });
    if (line === 'ok') return true;
    throw new SandboxError(`cannot mount ${what}: ${line.replace(/^err /, '')}`, { code: 'FORK_FAILED', stage: 'init' });
  }

  private start(python: string): ChildProcessWithoutNullStreams {
    const proc = spawn(python, ['-I', '-S', '-c', SCRIPT], { stdio: ['pipe', 'pipe', 'pipe'], env: { PATH: TRUSTED_PATH } });
    this.proc = proc;
    proc.stdout.setEncoding('utf8');
    proc.stdout.on('data', (d: string) => {
      this.buf += d;
      for (let i = this.buf.indexOf('\n'); i >= 0; i = this.buf.indexOf('\n')) {
        const line = this.buf.slice(0, i);
        this.buf = this.buf.slice(i + 1);
        this.waiting.shift()?.(line);
      }
    });
    proc.stderr.resume();
    // A helper that died answers every pending request with an error; the next one starts anew.
    const gone = (): void => {
      if (this.proc === proc) this.proc = null;
      for (const w of this.waiting.splice(0)) w('err the mount helper exited');
    };
    proc.on('exit', gone);
    proc.on('error', gone);
    // A write to a helper that died: its 'exit' answers the request (above).
    proc.stdin.on('error', () => undefined);
    // Never what keeps the host alive.
    proc.unref();
    return proc;
  }

  /** Ends the helper. Idempotent. */
  close(): void {
    this.closed = true;
    const proc = this.proc;
    this.proc = null;
    if (!proc) return;
    proc.stdin.end();
    proc.kill('SIGKILL');
  }
}
