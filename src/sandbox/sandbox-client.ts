import crypto from 'node:crypto';
import { createActor, fromPromise, type Actor } from 'xstate';
import { sandboxMachine } from '../../machines/sandbox.machine.js';
import { CancelledError, RolloutError, SandboxError, ValidationError, toRolloutError } from '../errors.js';
import type { UdsChannel } from '../ipc/uds-channel.js';
import {
  SandboxBashResultSchema,
  SandboxEditorResultSchema,
  SandboxForkPrewarmResultSchema,
  SandboxForkResultSchema,
  SandboxInterruptResultSchema,
  SandboxPythonResultSchema,
  SandboxReadResultSchema,
} from '../protocol/sandbox.js';
import { SandboxIntegrityResultSchema, type FileObservationResult } from '../protocol/integrity.js';
import type { BashRequest, BashResult, EditorRequest, EditorResult, PythonResult, Sandbox, SandboxFork, SandboxForkRequest } from './sandbox.js';

/** Timeouts the client needs to bound its requests to the host. */
export interface ClientTimeouts {
  bashMs: number;
  pythonMs: number;
}

// The host enforces tool timeouts itself; the channel timeout only catches a wedged host.
const GRACE_MS = 15_000;
const CLOSE_TIMEOUT_MS = 60_000;
// A fork makes its branches' shells (each bounded by the host's start timeout) and may copy a
// workspace first: bounded generously, only a wedged host meets it.
const FORK_TIMEOUT_MS = 180_000;

/** Makes the clients of sandboxes a fork made on this client's host (the provider registers them there). */
export type AdoptBranches = (sandboxIds: string[]) => SandboxClient[];

/** What a {@link SandboxClient} is made with. */
export interface SandboxClientOptions {
  id: string;
  /** The host process's channel the sandbox lives behind. */
  channel: UdsChannel;
  timeouts: ClientTimeouts;
  /** Sends `sandbox.create`; the machine leaves `starting` when it settles. */
  start: () => Promise<void>;
  /** Called once after the close path ran (the provider's bookkeeping). */
  onClosed: () => void;
  /** Registers a fork's branches with the provider; absent, the client cannot fork. */
  adopt?: AdoptBranches | undefined;
}

/**
 * The runtime-side {@link Sandbox}: each call is one request to the sandbox host that owns it.
 * Its state is the sandbox machine: a call on a lost or closed sandbox rejects with
 * SandboxError at once, and a loss rejects calls in flight (the channel's pending requests are
 * failed by the host notification or by the connection's close).
 */
export class SandboxClient implements Sandbox {
  /** `OPENAI_BASE_URL` inside the sandbox (set from the host's create reply), or undefined. */
  llmProxyUrl: string | undefined = undefined;
  private readonly actor: Actor<typeof sandboxMachine>;
  private readonly inflight = new Set<(err: Error) => void>();
  private readonly shellExitListeners = new Set<(exit: { exitCode: number }) => void>();
  /**
   * A CALL_DONE owed to the machine: sent on the next turn of the event loop unless a call that
   * starts first takes the `busy` over. Invariant: the machine's `inFlight` equals the calls in
   * flight plus one while this is set. Measured (bench/sandbox.ts): an XState event costs ~12 µs
   * right after a wake-up, so back-to-back calls no longer pay a busy → ready → busy round trip
   * on the latency path; every reader of the state ({@link state}, close, loss) settles it first.
   */
  private idleOwed: NodeJS.Immediate | null = null;
  private readonly sendIdle = (): void => {
    this.idleOwed = null;
    this.actor.send({ type: 'CALL_DONE' });
  };

  readonly id: string;
  private readonly channel: UdsChannel;
  private readonly timeouts: ClientTimeouts;
  private readonly adopt: AdoptBranches | undefined;

  constructor({ id, channel, timeouts, start, onClosed, adopt }: SandboxClientOptions) {
    this.id = id;
    this.channel = channel;
    this.timeouts = timeouts;
    this.adopt = adopt;
    this.actor = createActor(
      sandboxMachine.provide({
        actors: {
          startSandbox: fromPromise(start),
          closeSandbox: fromPromise(async () => {
            try {
              // Generous: the host removes the workdir before it answers, and a tree thousands of
              // levels deep takes seconds to remove on a loaded disk.
              if (this.channel.isOpen) await this.channel.request({ type: 'sandbox.close', sandboxId: this.id }, { timeoutMs: CLOSE_TIMEOUT_MS });
            } finally {
              onClosed();
            }
          }),
        },
      }),
    );
    this.actor.start();
  }

  /** The machine's state value, for diagnostics and tests (`ready` once no call is in flight). */
  get state(): string {
    this.settleIdle();
    return String(this.actor.getSnapshot().value);
  }

  /** Resolves once the machine has left `starting` (ready, or lost or closed). */
  started(): Promise<void> {
    const left = (): boolean => String(this.actor.getSnapshot().value) !== 'starting';
    return new Promise((resolve) => {
      if (left()) return resolve();
      const sub = this.actor.subscribe({
        next: () => {
          if (!left()) return;
          sub.unsubscribe();
          resolve();
        },
        complete: () => resolve(),
        error: () => resolve(),
      });
    });
  }

  /** Sends the owed CALL_DONE now, if any. */
  private settleIdle(): void {
    if (!this.idleOwed) return;
    clearImmediate(this.idleOwed);
    this.sendIdle();
  }

  /** Marks the sandbox lost: pending calls and every later call fail with SandboxError. */
  markLost(reason: string): void {
    this.settleIdle();
    this.actor.send({ type: 'LOST', reason });
    const err = new SandboxError(`sandbox ${this.id} lost: ${reason}`, { code: 'SANDBOX_LOST' });
    for (const reject of [...this.inflight]) reject(err);
  }

  /** Tells the {@link onShellExit} listeners that the host reported the shell's own exit. */
  shellExited(exitCode: number): void {
    for (const listener of [...this.shellExitListeners]) listener({ exitCode });
  }

  /** Sandbox.onShellExit: told from the host's `sandbox.shellExit` notification. */
  onShellExit(listener: (exit: { exitCode: number }) => void): () => void {
    this.shellExitListeners.add(listener);
    return () => {
      this.shellExitListeners.delete(listener);
    };
  }

  async bash(req: BashRequest, signal?: AbortSignal): Promise<BashResult> {
    const msg: CallMessage = { type: 'sandbox.bash', command: req.command };
    if (req.isInput) msg.isInput = true;
    if (req.timeoutMs) msg.timeoutMs = req.timeoutMs;
    const reply = await this.call(msg, (req.timeoutMs ?? this.timeouts.bashMs) + GRACE_MS, signal);
    return SandboxBashResultSchema.parse(reply).result;
  }

  async python(code: string, opts: { timeoutMs?: number } = {}, signal?: AbortSignal): Promise<PythonResult> {
    const reply = await this.call(
      { type: 'sandbox.python', code, ...(opts.timeoutMs ? { timeoutMs: opts.timeoutMs } : {}) },
      (opts.timeoutMs ?? this.timeouts.pythonMs) + GRACE_MS,
      signal,
    );
    return SandboxPythonResultSchema.parse(reply).result;
  }

  async editor(req: EditorRequest, signal?: AbortSignal): Promise<EditorResult> {
    const reply = await this.call({ type: 'sandbox.editor', request: req }, GRACE_MS, signal);
    return SandboxEditorResultSchema.parse(reply).result;
  }

  async readFile(path: string): Promise<string> {
    return SandboxReadResultSchema.parse(await this.call({ type: 'sandbox.read', path }, GRACE_MS)).content;
  }

  async writeFile(path: string, content: string): Promise<void> {
    await this.call({ type: 'sandbox.write', path, content }, GRACE_MS);
  }

  async signalProcesses(signal: 'SIGINT' | 'SIGKILL'): Promise<number> {
    return SandboxInterruptResultSchema.parse(await this.call({ type: 'sandbox.interrupt', signal }, GRACE_MS)).killed;
  }

  async resetShell(): Promise<void> {
    // A shell start (bounded by the host's start timeout) plus the channel's grace.
    await this.call({ type: 'sandbox.reset' }, 4 * GRACE_MS);
  }

  async integrity(req: { op: 'start'; protect: string[]; secret?: string[] } | { op: 'observe'; turn: number }): Promise<FileObservationResult> {
    return SandboxIntegrityResultSchema.parse(await this.call({ ...req, type: 'sandbox.integrity' }, GRACE_MS)).result;
  }

  /**
   * Forks the sandbox on its host (Sandbox.fork). The request is not cut short by `signal`: a
   * fork runs to its end on the host so that no branch is left half made; a signal that fired
   * meanwhile closes the branches and rejects with CancelledError. When the call fails the
   * branch ids are closed on the host (one it may still be making is closed when made).
   * @throws ValidationError for no `rolloutIds`; SandboxError as the host answers
   *   (`SANDBOX_BUSY`, `FREEZE_UNAVAILABLE`, `FORK_FAILED`, `SANDBOX_LOST`).
   */
  async fork(req: SandboxForkRequest, signal?: AbortSignal): Promise<SandboxFork> {
    if (req.rolloutIds.length === 0) throw new ValidationError('fork: rolloutIds must name at least one branch', [{ path: 'rolloutIds', message: 'must not be empty' }]);
    if (!this.adopt) throw new SandboxError(`sandbox ${this.id} cannot fork: its provider does not register branches`, { code: 'FORK_FAILED' });
    if (signal?.aborted) throw new CancelledError();
    const keepParent = req.keepParent ?? true;
    const ids = req.rolloutIds.map(() => `sb-${crypto.randomBytes(6).toString('hex')}`);
    let reply: Record<string, unknown>;
    try {
      reply = await this.call({ type: 'sandbox.fork', keepParent, branches: ids.map((sandboxId, i) => ({ sandboxId, rolloutId: req.rolloutIds[i]!, ...(req.llmProxies?.[i] ? { llmProxy: req.llmProxies[i] } : {}) })) }, FORK_TIMEOUT_MS);
    } catch (err) {
      // Best effort for branches that may not exist: the fork's own error is the answer, and a
      // host that cannot close them closes them when its runtime's connection ends.
      if (this.channel.isOpen) for (const sandboxId of ids) this.channel.request({ type: 'sandbox.close', sandboxId }, { timeoutMs: CLOSE_TIMEOUT_MS }).catch(() => undefined);
      throw err;
    }
    const out = SandboxForkResultSchema.parse(reply);
    const branches = this.adopt(out.branches);
    branches.forEach((b, i) => (b.llmProxyUrl = out.llmProxyUrls?.[i] ?? undefined));
    // Already running on the host: their machines leave `starting` on the next tick.
    await Promise.all(branches.map((b) => b.started()));
    // The host closed the parent already; this ends the client's machine (its close finds
    // nothing). Not awaited: the machine leaves `ready` at once (no call reaches the parent from
    // here on), and the round trip behind it waits on the host, busy with the parent's close
    // (20-60 ms loaded, bench/fork.ts). close() never rejects.
    if (!keepParent) void this.close();
    if (signal?.aborted) {
      await Promise.all(branches.map((b) => b.close()));
      throw new CancelledError();
    }
    return { branches, lost: out.lost, frozenMs: out.frozenMs, copiedBytes: out.copiedBytes };
  }

  /**
   * Parks up to `n` fork branches of this sandbox's configuration on its host (Sandbox.prewarmFork).
   * @throws ValidationError for `n` not an integer in 1..64; SandboxError when the sandbox is lost or closed.
   */
  async prewarmFork(n: number): Promise<number> {
    if (!Number.isInteger(n) || n < 1 || n > 64) throw new ValidationError('prewarmFork: n must be an integer from 1 to 64', [{ path: 'n', message: `must be an integer from 1 to 64, got ${JSON.stringify(n)}` }]);
    if (!this.adopt) return 0;
    return SandboxForkPrewarmResultSchema.parse(await this.call({ type: 'sandbox.forkPrewarm', n }, GRACE_MS)).parked;
  }

  /** Kills every process of the sandbox, removes its workdir. Idempotent; never throws. */
  async close(): Promise<void> {
    this.settleIdle();
    const snap = this.actor.getSnapshot();
    if (snap.status !== 'done') this.actor.send({ type: 'CLOSE' });
    await new Promise<void>((resolve) => {
      if (this.actor.getSnapshot().status === 'done') return resolve();
      const sub = this.actor.subscribe({ complete: () => (sub.unsubscribe(), resolve()), error: () => resolve() });
    });
  }

  /** `msg` is the caller's own fresh object: the sandbox id is set on it in place. */
  private async call(msg: CallMessage, timeoutMs: number, signal?: AbortSignal): Promise<Record<string, unknown>> {
    // Not `this.state`: `busy` with an owed CALL_DONE is as good as `ready` here.
    const state = String(this.actor.getSnapshot().value);
    if (state !== 'ready' && state !== 'busy') {
      const reason = this.actor.getSnapshot().context.reason;
      throw new SandboxError(`sandbox ${this.id} is ${state}${reason ? `: ${reason}` : ''}`, { code: 'SANDBOX_LOST' });
    }
    if (signal?.aborted) throw new CancelledError();
    // The request is written first (synchronously, inside request()); the machine event and the
    // bookkeeping below then overlap with the host's work instead of delaying the frame. No reply
    // can arrive before this tick ends, so the machine is `busy` before any reply is handled.
    // Set in place, not `{ ...msg, sandboxId }`: an object spread with an extra key is V8's slow
    // path on Node 20 (~5 µs), on the action's critical path (bench/sandbox.ts, `action_over_raw_pty`).
    msg.sandboxId = this.id;
    const sent = this.channel.request(msg, { timeoutMs, signal });
    if (this.idleOwed) {
      // The previous call's `busy` carries over to this one: no CALL_DONE, no CALL.
      clearImmediate(this.idleOwed);
      this.idleOwed = null;
    } else this.actor.send({ type: 'CALL' });
    let rejectLost!: (err: Error) => void;
    const settled = new Promise<Record<string, unknown>>((resolve, reject) => {
      rejectLost = reject;
      sent.then(resolve, reject);
    });
    this.inflight.add(rejectLost);
    const onAbort = (): void => {
      // Cancel must stop the work inside the sandbox, not only the wait for it.
      if (this.channel.isOpen) this.channel.request({ type: 'sandbox.interrupt', sandboxId: this.id }, { timeoutMs: 10_000 }).catch(() => undefined);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      return await settled;
    } catch (err) {
      throw asSandboxFault(err);
    } finally {
      signal?.removeEventListener('abort', onAbort);
      this.inflight.delete(rejectLost);
      if (this.idleOwed) this.actor.send({ type: 'CALL_DONE' });
      else this.idleOwed = setImmediate(this.sendIdle);
    }
  }
}

/** A request to the host before the client adds the sandbox id. */
type CallMessage = { type: string } & Record<string, unknown>;

/** Infra faults of the channel (closed, timed out) become SandboxError; typed errors pass through. */
export function asSandboxFault(err: unknown): RolloutError {
  const e = toRolloutError(err);
  if (e instanceof SandboxError || e.name !== 'InfraError') return e;
  return new SandboxError(e.message, { code: e.code, cause: e });
}
