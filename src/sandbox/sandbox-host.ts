import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { once } from 'node:events';
import { ProtocolError, SandboxError } from '../errors.js';
import { UdsChannel, type WireMessage } from '../ipc/uds-channel.js';
import { HostRequestSchema, NO_POOL_STATS, type HostRequest } from '../protocol/sandbox.js';
import { ForkPool } from './fork-pool.js';
import { HostSandbox, type HostOwner } from './host-sandbox.js';
import { Mounter } from './mounter.js';
import { handleIntegrity, releaseIntegrity } from './integrity/host-integrity.js';

/** Options of {@link runSandboxHost}. */
export interface SandboxHostOptions {
  socketPath: string;
  stateDir: string;
  /** Largest IPC frame. */
  maxFrameBytes?: number;
  /** Exit when no runtime connects within this many ms. Default 30 s. */
  connectTimeoutMs?: number;
  /** Where to print the `ready` line the provider waits for. */
  out?: NodeJS.WritableStream;
}

/**
 * The sandbox host: listens on a Unix socket, serves exactly one runtime connection, owns the
 * sandboxes that runtime creates. When that connection closes (the runtime exited, crashed or
 * closed it), it closes every sandbox and resolves — so no sandbox outlives its runtime.
 *
 * Prints `ready <pid>\n` once listening. Resolves with the process exit code.
 */
export async function runSandboxHost(opts: SandboxHostOptions): Promise<number> {
  fs.mkdirSync(path.dirname(opts.socketPath), { recursive: true });
  fs.mkdirSync(opts.stateDir, { recursive: true });
  fs.rmSync(opts.socketPath, { force: true });
  const sandboxes = new Map<string, HostSandbox>();
  const creating = new Set<string>();
  // A close that overtook its create (the runtime gave up waiting): honoured when create ends.
  const closedEarly = new Set<string>();
  // Closes in progress: the host's own exit waits for them (an overlay must not stay mounted).
  const closing = new Set<Promise<void>>();
  let owner: HostOwner | null = null;
  // Parked fork branches (fork-pool.ts), configured by the hello.
  let pool: ForkPool<HostSandbox> | null = null;
  // A fork's mounts, by a helper process started at the first fork (mounter.ts).
  const mounter = new Mounter();
  // A fork's branches taken from the pool have the pool's ids: a close of the id the runtime
  // proposed (its fork call failed or timed out meanwhile) reaches the branch under it.
  const forkAliases = new Map<string, string>();
  const aliasOf = new Map<string, string>();
  let channel: UdsChannel | null = null;

  const server = net.createServer();
  server.listen(opts.socketPath);
  await once(server, 'listening');
  (opts.out ?? process.stdout).write(`ready ${process.pid}\n`);

  const closeAll = async (): Promise<void> => {
    await Promise.all([...sandboxes.values()].map((s) => s.close()).concat(pool ? [pool.close()] : []));
    sandboxes.clear();
    await Promise.all([...closing]);
    mounter.close();
  };

  /** Tells the runtime that a sandbox's processes died under it. */
  const notifyLost =
    (sandboxId: string) =>
    (reason: string): void => {
      if (channel?.isOpen) channel.notify({ type: 'sandbox.lost', sandboxId, reason });
    };

  /** Keeps a sandbox the host made and forwards its shell's own exits to the runtime. */
  const register = (sb: HostSandbox): void => {
    sandboxes.set(sb.id, sb);
    sb.onShellExit((exitCode) => {
      if (channel?.isOpen) channel.notify({ type: 'sandbox.shellExit', sandboxId: sb.id, exitCode });
    });
  };

  const handle = async (raw: WireMessage & { id: number }): Promise<Record<string, unknown>> => {
    const parsed = HostRequestSchema.safeParse(raw);
    if (!parsed.success) {
      throw new ProtocolError(`bad ${raw.type} request: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`, { code: 'BAD_REQUEST' });
    }
    const req: HostRequest = parsed.data;
    if (req.type === 'host.hello') {
      owner = { runtimeId: req.runtimeId, ownerPid: req.ownerPid, ownerStart: req.ownerStart };
      if (req.forkPool && !pool) pool = new ForkPool<HostSandbox>(req.forkPool);
      return { pid: process.pid };
    }
    if (!owner) throw new ProtocolError('host.hello must come first', { code: 'NO_HELLO' });
    if (req.type === 'host.stats') return { forkPool: pool?.stats() ?? NO_POOL_STATS };
    if (req.type === 'sandbox.create') {
      if (sandboxes.has(req.sandboxId) || creating.has(req.sandboxId)) throw new SandboxError(`sandbox ${req.sandboxId} exists`, { code: 'SANDBOX_EXISTS' });
      creating.add(req.sandboxId);
      try {
        const sb = await HostSandbox.create(req, { stateDir: opts.stateDir, owner, onLost: notifyLost(req.sandboxId) });
        if (!channel?.isOpen || closedEarly.has(req.sandboxId)) {
          await sb.close();
          throw new SandboxError('sandbox closed while it was being created', { code: 'SANDBOX_CLOSED' });
        }
        register(sb);
        return { sandboxId: sb.id, workdir: sb.workdir, ...(sb.llmProxyUrl ? { llmProxyUrl: sb.llmProxyUrl } : {}) };
      } finally {
        creating.delete(req.sandboxId);
        closedEarly.delete(req.sandboxId);
      }
    }
    const alias = req.type === 'sandbox.close' ? forkAliases.get(req.sandboxId) : undefined;
    const sb = sandboxes.get(alias ?? req.sandboxId);
    if (req.type === 'sandbox.close') {
      if (creating.has(req.sandboxId)) closedEarly.add(req.sandboxId);
      const closedId = alias ?? req.sandboxId;
      sandboxes.delete(closedId);
      forkAliases.delete(aliasOf.get(closedId) ?? '');
      aliasOf.delete(closedId);
      if (sb) {
        // Never rejects (its one await swallows an unwatch of processes that died with the sandbox).
        void releaseIntegrity(sb);
        const p = sb.close();
        closing.add(p);
        await p.finally(() => closing.delete(p));
      }
      return {};
    }
    if (!sb) throw new SandboxError(`no sandbox ${req.sandboxId} on this host`, { code: 'SANDBOX_LOST' });
    switch (req.type) {
      case 'sandbox.bash':
        return { result: await sb.bash({ command: req.command, isInput: req.isInput, timeoutMs: req.timeoutMs }) };
      case 'sandbox.python':
        return { result: await sb.python(req.code, req.timeoutMs) };
      case 'sandbox.editor':
        return { result: await sb.editorOp(req.request) };
      case 'sandbox.read':
        return { content: await sb.readFile(req.path) };
      case 'sandbox.write':
        await sb.writeFile(req.path, req.content);
        return {};
      case 'sandbox.interrupt':
        return { killed: await sb.interrupt(req.signal) };
      case 'sandbox.reset':
        await sb.resetShell();
        return {};
      case 'sandbox.integrity':
        return { result: await handleIntegrity(sb, req) };
      case 'sandbox.forkPrewarm':
        // Launches in the background (the pool's): answered at once, the sandbox untouched.
        return { parked: sb.prewarmFork(req.n, { stateDir: opts.stateDir, owner, onLost: notifyLost, pool, mounter }) };
      case 'sandbox.fork': {
        const ids = req.branches.map((b) => b.sandboxId);
        if (new Set(ids).size !== ids.length || ids.some((id) => sandboxes.has(id) || creating.has(id))) throw new SandboxError('a fork branch id is already in use', { code: 'SANDBOX_EXISTS' });
        // Branches count as being created: a close that overtakes the fork is honoured at its end.
        for (const id of ids) creating.add(id);
        try {
          const out = await sb.fork(req, { stateDir: opts.stateDir, owner, onLost: notifyLost, pool, mounter });
          if (out.parentClosed) {
            sandboxes.delete(req.sandboxId);
            const p = out.parentClosed;
            closing.add(p);
            // Only the bookkeeping: `p` is awaited with the rest of `closing` at the host's exit.
            void p.finally(() => closing.delete(p));
          }
          if (!channel?.isOpen || ids.some((id) => closedEarly.has(id))) {
            await Promise.all(out.branches.map((b) => b.close()));
            throw new SandboxError('fork branches closed while they were being made', { code: 'SANDBOX_CLOSED' });
          }
          for (const b of out.branches) register(b);
          for (const [i, b] of out.branches.entries()) {
            if (b.id === ids[i]) continue;
            forkAliases.set(ids[i]!, b.id);
            aliasOf.set(b.id, ids[i]!);
          }
          return { branches: out.branches.map((b) => b.id), llmProxyUrls: out.branches.map((b) => b.llmProxyUrl ?? null), lost: out.lost, frozenMs: out.frozenMs, copiedBytes: out.copiedBytes };
        } finally {
          for (const id of ids) {
            creating.delete(id);
            closedEarly.delete(id);
          }
        }
      }
    }
  };

  const done = new Promise<number>((resolve) => {
    let finished = false;
    const finish = async (code: number): Promise<void> => {
      if (finished) return;
      finished = true;
      clearTimeout(connectTimer);
      server.close();
      await closeAll();
      fs.rmSync(opts.socketPath, { force: true });
      resolve(code);
    };
    const connectTimer = setTimeout(() => void finish(1), opts.connectTimeoutMs ?? 30_000);
    server.on('connection', (socket) => {
      if (channel) {
        // One runtime per host: a second connection could steal sandboxes.
        socket.destroy();
        return;
      }
      clearTimeout(connectTimer);
      channel = new UdsChannel(socket, {
        maxFrameBytes: opts.maxFrameBytes,
        onRequest: handle,
        onClose: () => void finish(0),
      });
    });
    for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.once(sig, () => void finish(0));
  });
  return done;
}
