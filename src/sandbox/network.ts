import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { SandboxError } from '../errors.js';
import { exited } from './proc.js';

/** Address of the user-mode DNS forwarder inside the sandbox (slirp4netns' default 10.0.2.3). */
export const SANDBOX_DNS = '10.0.2.3';

/**
 * User-mode egress for a `network: true` sandbox: the sandbox keeps its own network namespace
 * (never the host's), and slirp4netns (Debian package `slirp4netns`) gives it a `tap0`
 * (10.0.2.100/24, default route via 10.0.2.2, DNS at 10.0.2.3) whose traffic it re-sends from
 * ordinary host sockets.
 *
 * `--disable-host-loopback` refuses connections to the host's 127.0.0.1 (what 10.0.2.2 would
 * otherwise reach): the service's own port, the LLM backends and Redis bound to loopback stay
 * out of reach. Services bound to a public address of the host are reachable as from any other
 * machine. slirp4netns runs with `--enable-sandbox` (own mount namespace, capabilities dropped)
 * and `--enable-seccomp`, and exits when its exit fd (held by the sandbox host) closes, so a
 * host killed with SIGKILL leaves no helper behind.
 *
 * Why slirp4netns rather than pasta: its `--disable-host-loopback` is a single, long-standing
 * switch, and it attaches to an existing namespace by path, which bwrap's user namespace needs
 * (the pid form tries to join the user namespace too and is refused).
 */
export class UserNet {
  private constructor(private readonly proc: ChildProcess) {}

  /** Host pid of the slirp4netns process. */
  get pid(): number {
    return this.proc.pid!;
  }

  /**
   * Attaches user-mode networking to the network namespace of `targetPid` and waits until the
   * interface is configured.
   * @throws SandboxError when slirp4netns is missing or fails (the sandbox then has no network:
   *   it never falls back to the host's).
   */
  static async attach(targetPid: number, timeoutMs = 10_000): Promise<UserNet> {
    const args = [
      '--configure', '--mtu=65520', '--disable-host-loopback', '--enable-sandbox', '--enable-seccomp',
      '--ready-fd=3', '--exit-fd=4', '--netns-type=path', `/proc/${targetPid}/ns/net`, 'tap0',
    ];
    const proc = spawn('slirp4netns', args, { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] });
    const net = new UserNet(proc);
    let stderr = '';
    proc.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
    const ready = proc.stdio[3] as NodeJS.ReadableStream;
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`not ready in ${timeoutMs} ms`)), timeoutMs);
        ready.once('data', () => {
          clearTimeout(timer);
          resolve();
        });
        proc.once('error', (e) => {
          clearTimeout(timer);
          reject(e);
        });
        proc.once('exit', (code) => {
          clearTimeout(timer);
          reject(new Error(`exited with code ${code}`));
        });
      });
    } catch (err) {
      void net.close();
      const missing = (err as NodeJS.ErrnoException).code === 'ENOENT';
      throw new SandboxError(
        missing ? 'network: true needs slirp4netns (Debian package slirp4netns)' : `slirp4netns failed: ${(err as Error).message} ${stderr.trim()}`,
        { code: 'SANDBOX_NETWORK', stage: 'init' },
      );
    }
    proc.removeAllListeners('exit');
    return net;
  }

  /**
   * Stops the helper (the sandbox loses its network). Idempotent. Resolves once the process has
   * exited (a SIGKILL is delivered when the process next runs: on a loaded machine that is not at
   * once), so a closed sandbox leaves no helper behind.
   */
  close(): Promise<void> {
    for (const s of this.proc.stdio) (s as { destroy?: () => void } | null)?.destroy?.();
    const gone = exited(this.proc);
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill('SIGKILL');
    return gone;
  }
}

/** True when slirp4netns is installed. */
export function userNetAvailable(): boolean {
  return spawnSync('slirp4netns', ['--version'], { stdio: 'ignore' }).status === 0;
}
