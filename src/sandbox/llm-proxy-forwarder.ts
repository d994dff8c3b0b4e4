import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { SandboxError, TaskError } from '../errors.js';
import { offerLlmListener } from './llm-listener-handoff.js';
import { isRoot } from './sandbox-user.js';

/**
 * Port of the LLM proxy's loopback listener inside every sandbox that has one. Each sandbox has
 * its own network namespace, so one fixed port serves all of them; it sits below the ephemeral
 * range (32768+) so no outgoing connection inside the sandbox can hold it first.
 */
export const LLM_PROXY_PORT = 18_400;

/** Where the proxy's Unix socket is shown inside the sandbox. */
export const LLM_PROXY_SOCKET_INSIDE = '/run/rollout/llm.sock';

/** The `OPENAI_BASE_URL` a sandbox with an LLM proxy sees. */
export const LLM_PROXY_URL = `http://127.0.0.1:${LLM_PROXY_PORT}/v1`;

/** Name of the proxy socket's mount point in the sandbox's control dir (shown at /run/rollout). */
export const LLM_PROXY_SOCKET_FILE = 'llm.sock';

/**
 * Runs in a short-lived helper that joined ONLY the sandbox's network namespace (nsenter --net;
 * it keeps the host's filesystem, so image sandboxes need no node inside). It creates the
 * loopback listener there and hands the listening socket to the sandbox host over the IPC
 * channel, then exits. A socket keeps the namespace it was created in for its whole life, so the
 * sandbox host serves connections made inside the sandbox from its own event loop.
 */
const LISTENER_CHILD = `
const net = require('node:net');
const exit = (code) => process.exit(code);
// Exits when the sandbox host disconnects, which it does once it holds the handle (or is gone).
process.on('disconnect', () => exit(0));
setTimeout(() => exit(4), Number(process.env.ROLLOUT_LLM_TIMEOUT_MS)).unref();
const server = net.createServer({ pauseOnConnect: true });
server.once('error', (e) => { process.stderr.write(String(e && e.code || e)); exit(2); });
server.listen({ host: '127.0.0.1', port: Number(process.env.ROLLOUT_LLM_PORT), exclusive: true }, () => {
  process.send('listening', server);
});`;

/**
 * The LLM proxy plumbing of one sandbox (one per network namespace: a restarted shell gets a
 * new one): a loopback TCP listener `127.0.0.1:{@link LLM_PROXY_PORT}` inside the sandbox's
 * network namespace whose every connection is piped, byte for byte, to one host Unix socket.
 *
 * Why no long-lived forwarder process: the listener is created inside the namespace by a helper
 * that exits at once, and served by the sandbox host that owns the sandbox. Nothing is left to
 * own, reap or clean: closing the sandbox (or the host dying, even by SIGKILL) closes the
 * listener and its connections with the host's file descriptors, and the namespace with them.
 * The host only ever connects to the one socket path it was given, so the listener is no way
 * out for the sandbox: everything else on the host (its loopback included) stays unreachable.
 * Streaming works because nothing is buffered: each chunk is written on as it arrives (Nagle
 * off), ends and resets are passed on both ways.
 */
export class LlmProxyForwarder {
  private readonly conns = new Set<net.Socket>();
  private closed = false;
  private handed = false;

  private constructor(
    private readonly server: net.Server,
    private readonly socketPath: string,
  ) {
    // Both sides may half-close (a client that shuts down writing still reads the answer).
    (server as net.Server & { allowHalfOpen: boolean }).allowHalfOpen = true;
    server.on('connection', (inside: net.Socket) => this.forward(inside));
    server.on('error', () => undefined);
  }

  /** The listener's port (LLM_PROXY_PORT inside a namespace; an ephemeral one for the `none` driver). */
  get port(): number {
    return (this.server.address() as net.AddressInfo).port;
  }

  /**
   * The `none` driver shares the host's network: the listener is an ephemeral port of the host's
   * own loopback (development only, like the driver itself).
   */
  static async openOnHost(socketPath: string): Promise<LlmProxyForwarder> {
    const server = net.createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ host: '127.0.0.1', port: 0 }, resolve);
    });
    return new LlmProxyForwarder(server, socketPath);
  }

  /** Open connections (for tests). */
  get connections(): number {
    return this.conns.size;
  }

  /** True once the runtime serves the listener itself (llm-listener-handoff.ts) and this process no longer accepts on it. */
  get handedOver(): boolean {
    return this.handed;
  }

  /**
   * Creates the listener inside the network namespace of `targetPid` (a process of the
   * sandbox) and starts forwarding to `socketPath`.
   * @throws SandboxError when the helper cannot create the listener (no nsenter, no rights).
   */
  static async open(targetPid: number, socketPath: string, opts: { bringLoopbackUp?: boolean; timeoutMs?: number } = {}): Promise<LlmProxyForwarder> {
    const ns = `--net=/proc/${targetPid}/ns/net`;
    const timeoutMs = opts.timeoutMs ?? 120_000;
    // A fresh `unshare --net` namespace has its loopback down (bwrap brings it up itself).
    // Not spawnSync: the sandbox host's event loop serves every other sandbox meanwhile.
    if (opts.bringLoopbackUp) await new Promise<void>((resolve) => spawn('nsenter', [ns, '--', 'ip', 'link', 'set', 'lo', 'up'], { stdio: 'ignore', timeout: timeoutMs }).once('close', () => resolve()).once('error', () => resolve()));
    const child = spawn('nsenter', [ns, '--', process.execPath, '-e', LISTENER_CHILD], {
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
      env: { ROLLOUT_LLM_PORT: String(LLM_PROXY_PORT), ROLLOUT_LLM_TIMEOUT_MS: String(timeoutMs), PATH: process.env.PATH ?? '/usr/bin:/bin' },
      serialization: 'json',
    });
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-1000)));
    try {
      const server = await new Promise<net.Server>((resolve, reject) => {
        let got: net.Server | null = null;
        let exited = false;
        const timer = setTimeout(() => (got?.close(), reject(new Error(`no listener in ${timeoutMs} ms`))), timeoutMs);
        // Resolved once BOTH happened, in either order: the handle arrived (its 'message' may
        // come after the helper's exit: the parent re-listens on the fd first), and the helper
        // is gone (it can then no longer accept on the shared socket).
        const settle = (): void => {
          if (!got || !exited) return;
          clearTimeout(timer);
          resolve(got);
        };
        child.on('message', (msg, handle) => {
          if (msg === 'listening' && handle instanceof net.Server) {
            got = handle;
            // The helper's cue to exit: the handle is ours.
            if (child.connected) child.disconnect();
          }
          settle();
        });
        child.on('error', (e) => {
          // Once the handle is here, a late IPC error (the helper already gone) does not matter.
          if (got) return;
          clearTimeout(timer);
          reject(e);
        });
        child.once('exit', (code) => {
          exited = true;
          if (code === 0) return settle();
          clearTimeout(timer);
          got?.close();
          reject(new Error(`helper exited with ${code}${stderr ? `: ${stderr.trim()}` : ''}`));
        });
      });
      const f = new LlmProxyForwarder(server, socketPath);
      // The runtime that serves the proxy takes the listener when it can: no process between
      // the harness and the proxy (llm-listener-handoff.ts); until then, and otherwise, we forward.
      if (await offerLlmListener(server, socketPath)) {
        f.handed = true;
        if (!f.closed) server.close();
      }
      return f;
    } catch (err) {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      const missing = (err as NodeJS.ErrnoException).code === 'ENOENT';
      throw new SandboxError(missing ? 'llmProxy needs nsenter (Debian package util-linux)' : `cannot open the LLM proxy listener in the sandbox: ${(err as Error).message}`, {
        code: 'SANDBOX_LLM_PROXY',
        stage: 'init',
      });
    }
  }

  private forward(inside: net.Socket): void {
    if (this.closed) {
      inside.destroy();
      return;
    }
    const outside = net.connect({ path: this.socketPath, allowHalfOpen: true });
    inside.setNoDelay(true);
    this.conns.add(inside);
    // A reset or error on one side resets the other; ends are passed on by pipe().
    const kill = (): void => {
      inside.destroy();
      outside.destroy();
    };
    inside.once('error', kill);
    outside.once('error', kill);
    inside.once('close', (hadError) => {
      this.conns.delete(inside);
      if (hadError) outside.destroy();
      else outside.end();
    });
    outside.once('close', (hadError) => {
      if (hadError) inside.destroy();
      else inside.end();
    });
    inside.pipe(outside);
    outside.pipe(inside);
    inside.resume();
  }

  /** Stops listening and drops every connection. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.server.close();
    for (const c of this.conns) c.destroy();
    this.conns.clear();
  }
}

/**
 * Checks an `llmProxy.socketPath` before the sandbox starts.
 * @throws TaskError (BAD_SPEC) naming the field when the path is not an existing Unix socket.
 */
export function checkProxySocket(socketPath: string): void {
  let st: fs.Stats;
  try {
    st = fs.statSync(socketPath);
  } catch {
    throw new TaskError(`llmProxy.socketPath: no such socket: ${socketPath}`, { code: 'BAD_SPEC', stage: 'init' });
  }
  if (!st.isSocket()) throw new TaskError(`llmProxy.socketPath: not a Unix socket: ${socketPath}`, { code: 'BAD_SPEC', stage: 'init' });
}

/**
 * Shows the proxy socket at `<ctlDir>/llm.sock` (the sandbox's /run/rollout/llm.sock) when this
 * process is root: a bind mount made in the sandbox host's private mount namespace, carried
 * into the sandbox by the recursive bind of the control dir and removed with the sandbox's
 * tmpfs. The socket is made connectable by the sandbox's unprivileged uid (mode 0666): the
 * mount shows it to this sandbox only, and the per-rollout token still guards every request.
 * Returns false (nothing mounted) when not root: bwrap then binds it itself (see drivers.ts).
 * @throws SandboxError when the mount fails although this process is root.
 */
export function mountProxySocket(socketPath: string, ctlDir: string): boolean {
  // The mount point, in both cases: bwrap cannot create it inside the read-only /run/rollout.
  const target = path.join(ctlDir, LLM_PROXY_SOCKET_FILE);
  fs.writeFileSync(target, '', { mode: 0o644 });
  if (!isRoot()) return false;
  fs.chmodSync(socketPath, 0o666);
  const r = spawnSync('mount', ['--bind', socketPath, target], { encoding: 'utf8' });
  if (r.status !== 0) throw new SandboxError(`cannot bind the LLM proxy socket: ${(r.stderr || r.error?.message || '').trim()}`, { code: 'SANDBOX_LLM_PROXY', stage: 'init' });
  return true;
}
