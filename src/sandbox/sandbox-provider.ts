import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { CancelledError, SandboxError, TaskError } from '../errors.js';
import { UdsChannel } from '../ipc/uds-channel.js';
import { SandboxLostSchema, SandboxSpecSchema } from '../protocol/sandbox.js';
import { detectDriver, type DriverDetection } from './drivers.js';
import { ImageStore } from './images/image-store.js';
import { withWarmPools } from './warm-pool.js';
import { reapDeadHostSandboxes } from './images/orphan-reap.js';
import { hostsDir, reapSandbox, reapStale, sandboxesDir, type ReapReport } from './lease.js';
import { processStartTime } from './proc.js';
import { asSandboxFault, SandboxClient } from './sandbox-client.js';
import { parseSandboxOptions, type SandboxOptions, type SandboxOptionsInput } from './sandbox-options.js';
import type { Sandbox, SandboxProvider, SandboxSpec } from './sandbox.js';

const BIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../bin/rollout.js');

interface Host {
  index: number;
  proc: ChildProcess;
  channel: UdsChannel;
  socketPath: string;
  sandboxes: Map<string, SandboxClient>;
  /** Sandboxes placed on it, including ones starting. */
  load: number;
}

/** A {@link SandboxProvider} backed by sandbox-host processes, with what the CLI logs. */
export interface HostSandboxProvider extends SandboxProvider {
  /** The driver in use and why it was chosen. */
  readonly driver: DriverDetection;
  readonly options: SandboxOptions;
  /** Resolves with what the start-up reap cleaned. */
  readonly reaped: Promise<ReapReport>;
  /** Live host processes (for tests and metrics). */
  hostPids(): number[];
}

/**
 * Makes the runtime's sandbox provider. Hosts (`rollout sandbox-host`, `options.hosts` of
 * them, default the CPU count) are started lazily — a new one only while every running host
 * already has a sandbox — and each sandbox goes to the least loaded host.
 *
 * At construction it reaps stale sandboxes of dead runtimes in `stateDir` (before the first
 * create). `close()` closes every sandbox and host and waits for the host processes to exit.
 *
 * @throws ValidationError on bad options.
 */
export function createSandboxProvider(input: SandboxOptionsInput = {}): HostSandboxProvider {
  const options = parseSandboxOptions(input);
  const driver = detectDriver(options.driver);
  if (driver.unsafe) process.emitWarning(`sandbox driver 'none': ${driver.reason}; commands run UNCONFINED on this machine (development only)`, { code: 'ROLLOUT_UNSAFE_SANDBOX' });
  fs.mkdirSync(hostsDir(options.stateDir), { recursive: true, mode: 0o700 });
  const reaped = reapStale(options.stateDir);
  const ownerStart = processStartTime(process.pid);
  const hosts: Host[] = [];
  const starting = new Map<number, Promise<Host>>();
  let hostSeq = 0;
  let closed = false;
  const images = new ImageStore(options.imageStore);

  const startHost = async (): Promise<Host> => {
    const index = hostSeq++;
    const socketPath = path.join(hostsDir(options.stateDir), `h-${process.pid}-${ownerStart ?? 0}-${index}.sock`);
    const proc = spawn(process.execPath, [BIN, 'sandbox-host', '--socket', socketPath, '--state-dir', options.stateDir, '--max-frame-bytes', String(options.maxFrameBytes)], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    proc.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
    const ready = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new SandboxError(`sandbox host did not start in ${options.timeouts.hostStartMs} ms: ${stderr}`)), options.timeouts.hostStartMs);
      const rl = readline.createInterface({ input: proc.stdout! });
      rl.on('line', (line) => {
        if (line.startsWith('ready ')) {
          clearTimeout(timer);
          resolve();
        }
      });
      proc.once('exit', (code) => {
        clearTimeout(timer);
        reject(new SandboxError(`sandbox host exited with ${code} before it was ready: ${stderr.trim()}`));
      });
    });
    try {
      await ready;
    } catch (err) {
      proc.kill('SIGKILL');
      throw err;
    }
    const host: Host = { index, proc, socketPath, sandboxes: new Map(), load: 0, channel: undefined as never };
    host.channel = await UdsChannel.connect(socketPath, {
      maxFrameBytes: options.maxFrameBytes,
      onNotification: (msg) => {
        const lost = SandboxLostSchema.safeParse(msg);
        if (lost.success) host.sandboxes.get(lost.data.sandboxId)?.markLost(lost.data.reason);
      },
      onClose: () => {
        const i = hosts.indexOf(host);
        if (i >= 0) hosts.splice(i, 1);
        const orphans = [...host.sandboxes.keys()];
        for (const sb of host.sandboxes.values()) sb.markLost('its sandbox host closed the connection or died');
        if (closed || orphans.length === 0) return;
        // The host died with sandboxes: once it is gone, clean what it could not (cgroups, dirs).
        const reap = (): void => void Promise.all(orphans.map((id) => reapSandbox(path.join(sandboxesDir(options.stateDir), id))));
        if (proc.exitCode !== null || proc.signalCode !== null) reap();
        else proc.once('exit', reap);
      },
    });
    await host.channel.request({ type: 'host.hello', runtimeId: options.runtimeId, ownerPid: process.pid, ownerStart }, { timeoutMs: options.timeouts.hostStartMs });
    return host;
  };

  /** Picks a host and counts the sandbox on it at once, so concurrent creates spread out. */
  const pickHost = async (): Promise<Host> => {
    const idle = hosts.find((h) => h.load === 0);
    if (!idle && hosts.length + starting.size < options.hosts) {
      const id = hostSeq;
      const p = startHost().then(
        (h) => {
          starting.delete(id);
          if (closed) {
            void h.channel.close();
            throw new SandboxError('sandbox provider closed', { code: 'PROVIDER_CLOSED' });
          }
          hosts.push(h);
          return h;
        },
        (err) => {
          starting.delete(id);
          throw err;
        },
      );
      starting.set(id, p);
      const h = await p;
      h.load++;
      return h;
    }
    if (hosts.length === 0) {
      const h = await Promise.any([...starting.values()]);
      h.load++;
      return h;
    }
    const h = hosts.reduce((a, b) => (b.load < a.load ? b : a));
    h.load++;
    return h;
  };

  const provider: HostSandboxProvider = {
    driver,
    options,
    reaped,
    hostPids: () => hosts.map((h) => h.proc.pid!).filter(Boolean),

    async create(spec: SandboxSpec, opts: { rolloutId: string; signal?: AbortSignal | undefined }): Promise<Sandbox> {
      if (closed) throw new SandboxError('sandbox provider is closed', { code: 'PROVIDER_CLOSED' });
      const parsed = SandboxSpecSchema.safeParse(spec);
      if (!parsed.success) throw new TaskError(`invalid sandbox spec: ${parsed.error.message}`, { code: 'BAD_SPEC', stage: 'init' });
      if (opts.signal?.aborted) throw new CancelledError();
      // An unknown image is the task's fault (TaskError IMAGE_NOT_FOUND naming it), found before any host work.
      const image = parsed.data.image ? images.resolve(parsed.data.image) : null;
      await reaped;
      const host = await pickHost();
      const sandboxId = `sb-${crypto.randomBytes(6).toString('hex')}`;
      const startReq = {
        type: 'sandbox.create',
        sandboxId,
        rolloutId: opts.rolloutId,
        spec: parsed.data,
        driver: driver.driver,
        rootfs: options.rootfs,
        image,
        limits: options.limits,
        tools: {
          bashTimeoutMs: options.timeouts.bashMs,
          noOutputTimeoutMs: options.timeouts.noOutputMs,
          pythonTimeoutMs: options.timeouts.pythonMs,
          maxOutputChars: options.maxOutputChars,
          startTimeoutMs: options.timeouts.startMs,
        },
      };
      const startDone = host.channel.request(startReq, { timeoutMs: options.timeouts.startMs + 10_000, signal: opts.signal }).then(() => undefined);
      const client = new SandboxClient(
        sandboxId,
        host.channel,
        { bashMs: options.timeouts.bashMs, pythonMs: options.timeouts.pythonMs },
        () => startDone,
        () => {
          host.sandboxes.delete(sandboxId);
          host.load--;
        },
      );
      host.sandboxes.set(sandboxId, client);
      try {
        await startDone;
      } catch (err) {
        // The host may still be creating it (abort, timeout): its close path removes it either way.
        host.sandboxes.delete(sandboxId);
        host.load--;
        if (host.channel.isOpen) host.channel.request({ type: 'sandbox.close', sandboxId }, { timeoutMs: options.timeouts.startMs + 10_000 }).catch(() => undefined);
        throw asSandboxFault(err);
      }
      return client;
    },

    async close(): Promise<void> {
      if (closed) return;
      closed = true;
      await Promise.allSettled([...starting.values()]);
      const all = [...hosts];
      await Promise.all(all.flatMap((h) => [...h.sandboxes.values()].map((s) => s.close())));
      await Promise.all(
        all.map(async (h) => {
          const exited = h.proc.exitCode !== null ? Promise.resolve() : new Promise<void>((r) => h.proc.once('exit', () => r()));
          await h.channel.close();
          const t = setTimeout(() => h.proc.kill('SIGKILL'), 5000);
          await exited;
          clearTimeout(t);
        }),
      );
      hosts.length = 0;
      // A host killed mid-close leaves sandboxes (and image overlays) behind: clean them now.
      await reapDeadHostSandboxes(options.stateDir);
    },
  };
  return withWarmPools(provider, options);
}
