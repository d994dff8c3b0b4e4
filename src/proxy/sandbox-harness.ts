import type { ExternalAgent, ExternalAgentEvent } from './agent-contract.js';
import { sleep, systemClock, type Clock } from '../clock.js';
import { withoutShellNote } from '../sandbox/output.js';
import type { Sandbox } from '../sandbox/sandbox.js';
import type { LlmProxy } from './llm-proxy.js';

/** How long one wait on the harness's shell lasts before the next (the stop latency's bound without a kill sweep). */
const POLL_MS = 1_000;
/** How long a harness has after SIGINT to finish its writes and exit before everything left is SIGKILLed. */
export const HARNESS_STOP_GRACE_MS = 2_000;
/** Output of the harness kept for the eval details (its tail). */
const KEEP_OUTPUT = 64 * 1024;

/**
 * A harness command running in the foreground of a sandbox's shell, whose LLM calls arrive on
 * `proxy`: the {@link ExternalAgent} the `harness` family hands the runtime.
 *
 * The command runs through the sandbox's bash, in a subshell (so it sees the proxy's
 * `OPENAI_BASE_URL` / `OPENAI_API_KEY` the sandbox exports, and an `exec` or `exit` in it cannot
 * replace or end the shell the eval needs); a background loop waits on it in short polls until
 * it exits, keeping what it prints without the shell's notes to a model.
 *
 * {@link stop} — called when the loop ends for any reason, before the eval — treats the harness
 * as an adversary: it ends the proxy side (410 from then on), sends SIGINT to every process of
 * the sandbox but its shell (the harness, its children, daemons that left its process group or
 * session), gives them {@link HARNESS_STOP_GRACE_MS} to exit, then SIGKILLs whatever is left in a
 * sweep that holds off forks (`Sandbox.signalProcesses`). It resolves once nothing the harness
 * started is alive, so the eval sees a quiet workspace. A sandbox without `signalProcesses` (a
 * test double) gets Ctrl-C, then Ctrl-\ after the grace, on the shell's foreground group.
 */
export class SandboxHarness implements ExternalAgent {
  private readonly poll = new AbortController();
  private readonly exited: Promise<{ exitCode: number | null }>;
  private result: { exitCode: number | null } | null = null;
  private out = '';
  private stopping: Promise<void> | null = null;
  /** Set once stop began: an exit seen from then on is the stop's doing, not the harness's own. */
  private stopped = false;
  /** Set once the kill sweep ran: the poll loop ends at its next turn whatever the shell says. */
  private swept = false;
  /** The pending {@link next}'s way to learn of the exit (one at a time). */
  private onExit: ((r: { exitCode: number | null }) => void) | null = null;

  private readonly sandbox: Sandbox;
  private readonly proxy: LlmProxy;
  readonly limits: { maxLlmCalls?: number | undefined; maxTokensTotal?: number | undefined };
  private readonly clock: Clock;

  /**
   * Starts `command` in `sandbox`'s shell; its chat requests arrive through `proxy`. `limits`:
   * the rollout's caps on its LLM calls and tokens; `clock` defaults to the system clock.
   */
  constructor(o: { sandbox: Sandbox; command: string; proxy: LlmProxy; limits: SandboxHarness['limits']; clock?: Clock | undefined }) {
    this.sandbox = o.sandbox;
    this.proxy = o.proxy;
    this.limits = o.limits;
    this.clock = o.clock ?? systemClock;
    this.exited = this.run(o.command).then((r) => {
      this.result = r;
      this.onExit?.(r);
      return r;
    });
  }

  /** The tail of what the harness printed (stdout and stderr, as the terminal showed them). */
  get output(): string {
    return this.out;
  }

  /** Its exit code when it exited by itself; null while it runs, when it was stopped, or lost. */
  get exitCode(): number | null {
    return this.result?.exitCode ?? null;
  }

  next(signal: AbortSignal): Promise<ExternalAgentEvent> {
    if (this.result) return Promise.resolve({ type: 'exit', exitCode: this.result.exitCode });
    if (signal.aborted) return Promise.reject(signal.reason);
    // Every LLM call's path, so no composite signal, no abort controller, no race per call: the
    // proxy's waiter listens on the loop's signal itself, and an exit (rare: once per rollout)
    // withdraws it. A `Promise.race` with a promise derived from `exited` per call also left one
    // reaction on `exited` per call until the harness exited: O(calls) held per rollout.
    return new Promise<ExternalAgentEvent>((resolve, reject) => {
      this.onExit = (r) => {
        this.onExit = null;
        this.proxy.withdraw();
        resolve({ type: 'exit', exitCode: r.exitCode });
      };
      this.proxy.next(signal).then(
        (call) => {
          this.onExit = null;
          resolve({ type: 'chat', call });
        },
        (err: unknown) => {
          this.onExit = null;
          reject(err);
        },
      );
    });
  }

  stop(reason: string): Promise<void> {
    this.stopping ??= this.shutdown(reason);
    return this.stopping;
  }

  private async shutdown(reason: string): Promise<void> {
    this.proxy.end(reason);
    this.stopped = true;
    const signalProcesses = this.sandbox.signalProcesses?.bind(this.sandbox);
    if (!signalProcesses) {
      if (this.result) return;
      this.poll.abort(new Error(`harness stopped: ${reason}`));
      await this.exited;
      return;
    }
    try {
      // Even a harness that exited by itself may have left a daemon writing: the sweep runs always.
      if (!this.result && (await signalProcesses('SIGINT')) > 0) {
        const grace = new AbortController();
        await Promise.race([this.exited, sleep(this.clock, HARNESS_STOP_GRACE_MS, grace.signal).catch(() => undefined)]);
        grace.abort();
      }
      await signalProcesses('SIGKILL');
    } catch {
      // The sandbox is lost or closed: its close kills everything, and no eval runs in it.
    }
    this.swept = true;
    // The foreground command is dead: the shell's marker ends the poll in flight.
    await this.exited;
  }

  private async run(command: string): Promise<{ exitCode: number | null }> {
    const signal = this.poll.signal;
    try {
      // A subshell: `exec` or `exit` in the command ends the subshell, never the sandbox's shell.
      let r = await this.sandbox.bash({ command: `(\n${command}\n)`, timeoutMs: POLL_MS }, signal);
      this.keep(r.output);
      while (r.exitCode === null) {
        // Swept, yet the shell still reports a running command (should not happen): interrupt it.
        if (this.swept) return await this.kill();
        r = await this.sandbox.bash({ command: '', timeoutMs: POLL_MS }, signal);
        this.keep(r.output);
      }
      return { exitCode: this.stopped ? null : r.exitCode };
    } catch {
      // Stopped (the aborted call sent Ctrl-C) or the sandbox was lost: make sure it is down.
      return this.kill();
    }
  }

  /** Ctrl-C (sent by an aborted wait, or here), a grace, then Ctrl-\; the rest is the sandbox close's. */
  private async kill(): Promise<{ exitCode: number | null }> {
    for (const key of [this.swept ? 'C-c' : '', 'C-\\']) {
      try {
        if (key) await this.sandbox.bash({ command: key, isInput: true, timeoutMs: HARNESS_STOP_GRACE_MS });
        const r = await this.sandbox.bash({ command: '', timeoutMs: HARNESS_STOP_GRACE_MS });
        this.keep(r.output);
        if (r.exitCode !== null || !r.timedOut) return { exitCode: null };
      } catch {
        return { exitCode: null };
      }
    }
    return { exitCode: null };
  }

  private keep(text: string): void {
    // The shell tool's notes to a model are not the harness's output; without them the pieces of
    // a line printed across two polls join up again.
    const own = withoutShellNote(text);
    if (!own) return;
    this.out += own;
    if (this.out.length > KEEP_OUTPUT) this.out = this.out.slice(-KEEP_OUTPUT);
  }
}
