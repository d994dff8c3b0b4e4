import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { spawn, type ChildProcess } from 'node:child_process';
import { systemClock, type Clock } from '../clock.js';
import { CancelledError, SandboxError, TaskError } from '../errors.js';
import { UdsChannel } from '../ipc/uds-channel.js';
import { HostStatsResultSchema, NO_POOL_STATS, SandboxCreateResultSchema, SandboxLostSchema, SandboxShellExitSchema, SandboxSpecSchema, type ForkPoolStats } from '../protocol/sandbox.js';
import { harnessLimits } from './harness-mount.js';
import { detectDriver, type DriverDetection } from './drivers.js';
import { ImageStore } from './images/image-store.js';
import { withWarmPools } from './warm-pool.js';
import { serveLlmListenerOffers } from './llm-listener-handoff.js';
import { reapDeadHostSandboxes } from './images/orphan-reap.js';
import { hostsDir, reapSandbox, reapStale, sandboxesDir, type ReapReport } from './lease.js';
import { exited, processStartTime } from './proc.js';
import { asSandboxFault, SandboxClient } from './sandbox-client.js';
import { checkRootfs, privateMountsPrefix } from './sandbox-fs.js';
import { sandboxUidFor } from './sandbox-user.js';
import { parseSandboxOptions, type SandboxOptions, type SandboxOptionsInput } from './sandbox-options.js';
import type { Sandbox, SandboxProvider, SandboxSpec } from './sandbox.js';
import { checkFileKeys, fileKeysError } from './workspace-path.js';
import { packagePath } from '../package-root.js';

// From the package root, so the built dist/ finds it as the sources do (src/package-root.ts).
const BIN = packagePath('bin', 'rollout.js');
/** A host's answer to `host.stats` (a metrics scrape): past it, that host is left out of the sum. */
const STATS_TIMEOUT_MS = 5_000;
const POOL_STAT_KEYS = Object.keys(NO_POOL_STATS) as (keyof ForkPoolStats)[];

interface Host {
  index: number;
  /** Set as soon as the process is spawned (so close can wait for it). */
  proc: ChildProcess | null;
  /** Set once the host is ready and greeted. */
  channel: UdsChannel;
  socketPath: string;
  sandboxes: Map<string, SandboxClient>;
  /** Sandboxes placed on it, including ones starting and ones waiting for the host to start. */
  load: number;
  /** Resolves once the host is ready for requests; rejects when it failed to start. */
  ready: Promise<Host>;
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
  /** Its hosts' fork pools summed (`host.stats`); a host that does not answer in 5 s is left out. */
  forkPoolStats(): Promise<ForkPoolStats>;
}

/**
 * Makes the runtime's sandbox provider. Hosts (`rollout sandbox-host`, `options.hosts` of
 * them, default the CPU count) are started lazily — a new one only while every host already
 * has a sandbox — and each sandbox goes to the least loaded host, counting hosts still starting
 * with the sandboxes promised to them. A host's socket file is removed as soon as its process
 * is seen to exit.
 *
 * At construction it reaps stale sandboxes of dead runtimes in `stateDir` (before the first
 * create). `close()` closes every sandbox and host and waits for the host processes to exit.
 *
 * @throws ValidationError on bad options.
 */
/** `clock` times the host start-up limit and the kill grace at close. Default the system clock. */
export function createSandboxProvider(input: SandboxOptionsInput = {}, clock: Clock = systemClock): HostSandboxProvider {
  const options = parseSandboxOptions(input);
  if (options.rootfs !== null) checkRootfs(options.rootfs);
  const driver = detectDriver(options.driver);
  if (driver.unsafe) process.emitWarning(`sandbox driver 'none': ${driver.reason}; commands run UNCONFINED on this machine (development only)`, { code: 'ROLLOUT_UNSAFE_SANDBOX' });
  fs.mkdirSync(hostsDir(options.stateDir), { recursive: true, mode: 0o700 });
  const reaped = reapStale(options.stateDir);
  const ownerStart = processStartTime(process.pid);
  /** Every host, starting or running: placement counts both. */
  const hosts: Host[] = [];
  let hostSeq = 0;
  let closed = false;
  const images = new ImageStore(options.imageStore);

  /** Spawns a host process and waits until it is ready and greeted. */
  const launch = async (host: Host): Promise<Host> => {
    // As root, each host gets a private mount namespace: its sandboxes' tmpfs mounts vanish with it.
    const [hostFile, ...hostPrefix] = [...privateMountsPrefix(), process.execPath];
    const proc = spawn(hostFile!, [...hostPrefix, BIN, 'sandbox-host', '--socket', host.socketPath, '--state-dir', options.stateDir, '--max-frame-bytes', String(options.maxFrameBytes)], {
      // The IPC channel carries only the LLM proxy listener's handover (llm-listener-handoff.ts).
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
    });
    host.proc = proc;
    serveLlmListenerOffers(proc);
    // A host killed outright cannot remove its socket: do it the moment it is seen to die, so
    // no stale socket waits for the next start-up's reap.
    proc.once('exit', () => fs.rmSync(host.socketPath, { force: true }));
    let stderr = '';
    proc.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
    const ready = new Promise<void>((resolve, reject) => {
      const timer = clock.setTimeout(() => reject(new SandboxError(`sandbox host did not start in ${options.timeouts.hostStartMs} ms: ${stderr}`)), options.timeouts.hostStartMs);
      const rl = readline.createInterface({ input: proc.stdout! });
      rl.on('line', (line) => {
        if (line.startsWith('ready ')) {
          clock.clearTimeout(timer);
          resolve();
        }
      });
      proc.once('exit', (code) => {
        clock.clearTimeout(timer);
        reject(new SandboxError(`sandbox host exited with ${code} before it was ready: ${stderr.trim()}`));
      });
    });
    try {
      await ready;
    } catch (err) {
      proc.kill('SIGKILL');
      throw err;
    }
    host.channel = await UdsChannel.connect(host.socketPath, {
      maxFrameBytes: options.maxFrameBytes,
      onNotification: (msg) => {
        const lost = SandboxLostSchema.safeParse(msg);
        if (lost.success) host.sandboxes.get(lost.data.sandboxId)?.markLost(lost.data.reason);
        const exit = SandboxShellExitSchema.safeParse(msg);
        if (exit.success) host.sandboxes.get(exit.data.sandboxId)?.shellExited(exit.data.exitCode);
      },
      onClose: () => {
        const i = hosts.indexOf(host);
        if (i >= 0) hosts.splice(i, 1);
        const orphans = [...host.sandboxes.keys()];
        for (const sb of host.sandboxes.values()) sb.markLost('its sandbox host closed the connection or died');
        if (closed) return;
        // The host died with sandboxes: once it is gone, clean what it could not (cgroups, dirs),
        // then whatever else its leases name (fork snapshots, parked fork branches).
        const reap = (): void => void Promise.all(orphans.map((id) => reapSandbox(path.join(sandboxesDir(options.stateDir), id)))).then(() => reapDeadHostSandboxes(options.stateDir));
        if (proc.exitCode !== null || proc.signalCode !== null) reap();
        else proc.once('exit', reap);
      },
    });
    await host.channel.request({ type: 'host.hello', runtimeId: options.runtimeId, ownerPid: process.pid, ownerStart, forkPool: options.forkPool }, { timeoutMs: options.timeouts.hostStartMs });
    if (closed) {
      // Never rejects (close() only ends the socket and awaits its end); the throw is the answer.
      void host.channel.close();
      throw new SandboxError('sandbox provider closed', { code: 'PROVIDER_CLOSED' });
    }
    return host;
  };

  const startHost = (): Host => {
    const index = hostSeq++;
    const socketPath = path.join(hostsDir(options.stateDir), `h-${process.pid}-${ownerStart ?? 0}-${index}.sock`);
    const host: Host = { index, proc: null, channel: undefined as never, socketPath, sandboxes: new Map(), load: 0, ready: undefined as never };
    host.ready = launch(host).catch((err: unknown) => {
      const i = hosts.indexOf(host);
      if (i >= 0) hosts.splice(i, 1);
      throw err;
    });
    host.ready.catch(() => undefined); // awaited by the creates placed on it
    hosts.push(host);
    return host;
  };

  /**
   * Picks a host and counts the sandbox on it at once, so concurrent creates spread out.
   * Hosts still starting count with the sandboxes already promised to them: a burst that
   * arrives while hosts start is spread over all of them, not piled on the first one ready.
   * A new host starts only while every host already has a sandbox.
   */
  const pickHost = async (): Promise<Host> => {
    if (closed) throw new SandboxError('sandbox provider is closed', { code: 'PROVIDER_CLOSED' });
    if (!hosts.some((h) => h.load === 0) && hosts.length < options.hosts) startHost();
    const host = hosts.reduce((a, b) => (b.load < a.load ? b : a));
    host.load++;
    try {
      return await host.ready;
    } catch (err) {
      host.load--;
      throw err;
    }
  };

  /**
   * Registers sandboxes a fork made on `host` (they live in its mount namespace, next to their
   * snapshot): each a client of its own, counted on that host, reaped with it if it dies.
   */
  const adoptOn =
    (host: Host) =>
    (ids: string[]): SandboxClient[] =>
      ids.map((sandboxId) => {
        host.load++;
        const client = new SandboxClient({
          id: sandboxId,
          channel: host.channel,
          timeouts: { bashMs: options.timeouts.bashMs, pythonMs: options.timeouts.pythonMs },
          start: () => Promise.resolve(),
          onClosed: () => {
            host.sandboxes.delete(sandboxId);
            host.load--;
          },
          adopt: adoptOn(host),
        });
        host.sandboxes.set(sandboxId, client);
        return client;
      });

  const provider: HostSandboxProvider = {
    driver,
    options,
    reaped,
    hostPids: () => hosts.filter((h) => h.channel?.isOpen).map((h) => h.proc!.pid!),

    async forkPoolStats(): Promise<ForkPoolStats> {
      // Hosts up now; one that does not answer in time (busy, wedged) is left out of the sum,
      // not waited for: a metrics scrape must not hang on a host.
      const replies = await Promise.allSettled(
        hosts.filter((h) => h.channel?.isOpen).map(async (h) => HostStatsResultSchema.parse(await h.channel.request({ type: 'host.stats' }, { timeoutMs: STATS_TIMEOUT_MS })).forkPool),
      );
      const sum = { ...NO_POOL_STATS };
      for (const r of replies) {
        if (r.status !== 'fulfilled') continue;
        for (const k of POOL_STAT_KEYS) sum[k] += r.value[k];
      }
      return sum;
    },

    async create(spec: SandboxSpec, opts: { rolloutId: string; signal?: AbortSignal | undefined }): Promise<Sandbox> {
      if (closed) throw new SandboxError('sandbox provider is closed', { code: 'PROVIDER_CLOSED' });
      const parsed = SandboxSpecSchema.safeParse(spec);
      if (!parsed.success) throw new TaskError(`invalid sandbox spec: ${parsed.error.message}`, { code: 'BAD_SPEC', stage: 'init' });
      // Bad `files` keys are bad instance data: refused here, before any host work or retry.
      const badKeys = checkFileKeys(Object.keys(parsed.data.files ?? {}));
      if (badKeys.length) throw fileKeysError(badKeys);
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
        limits: parsed.data.harnessStore ? harnessLimits(options.limits) : options.limits,
        sandboxUid: sandboxUidFor(sandboxId, options.sandboxUids),
        tools: {
          bashTimeoutMs: options.timeouts.bashMs,
          noOutputTimeoutMs: options.timeouts.noOutputMs,
          pythonTimeoutMs: options.timeouts.pythonMs,
          maxOutputChars: options.maxOutputChars,
          startTimeoutMs: options.timeouts.startMs,
        },
      };
      let llmProxyUrl: string | undefined;
      const startDone = host.channel.request(startReq, { timeoutMs: options.timeouts.startMs + 10_000, signal: opts.signal }).then((reply) => {
        llmProxyUrl = SandboxCreateResultSchema.safeParse(reply).data?.llmProxyUrl;
      });
      const client = new SandboxClient({
        id: sandboxId,
        channel: host.channel,
        timeouts: { bashMs: options.timeouts.bashMs, pythonMs: options.timeouts.pythonMs },
        start: () => startDone,
        onClosed: () => {
          host.sandboxes.delete(sandboxId);
          host.load--;
        },
        adopt: adoptOn(host),
      });
      host.sandboxes.set(sandboxId, client);
      try {
        await startDone;
        client.llmProxyUrl = llmProxyUrl;
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
      // Hosts still starting are waited for too (they close themselves on seeing `closed`).
      const every = [...hosts];
      await Promise.allSettled(every.map((h) => h.ready));
      const live = every.filter((h) => h.channel?.isOpen);
      await Promise.all(live.flatMap((h) => [...h.sandboxes.values()].map((s) => s.close())));
      await Promise.all(
        every.map(async (h) => {
          const proc = h.proc;
          if (!proc) return;
          const gone = exited(proc);
          if (h.channel?.isOpen) await h.channel.close();
          const t = clock.setTimeout(() => proc.kill('SIGKILL'), 5000);
          await gone;
          clock.clearTimeout(t);
        }),
      );
      hosts.length = 0;
      // A host killed mid-close leaves sandboxes (and image overlays) behind: clean them now.
      await reapDeadHostSandboxes(options.stateDir);
    },
  };
  return withWarmPools(provider, options);
}
