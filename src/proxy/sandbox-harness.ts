import type { ExternalAgent, ExternalAgentEvent } from '../handlers/agent-handler.js';
import type { Sandbox } from '../sandbox/sandbox.js';
import type { LlmProxy } from './llm-proxy.js';

/** How long one wait on the harness's shell lasts before the next (the stop latency's bound). */
const POLL_MS = 1_000;
/** Output of the harness kept for the eval details (its tail). */
const KEEP_OUTPUT = 64 * 1024;

/**
 * A harness command running in the foreground of a sandbox's shell, whose LLM calls arrive on
 * `proxy`: the {@link ExternalAgent} the `harness` family hands the runtime.
 *
 * The command runs through the sandbox's bash (so it sees the proxy's `OPENAI_BASE_URL` /
 * `OPENAI_API_KEY` the sandbox exports); a background loop waits on it in short polls until it
 * exits. {@link stop} ends the proxy side (410 from then on), then interrupts the command's
 * foreground process group — the harness and its children — with Ctrl-C, then Ctrl-\ if it is
 * still running after a grace; closing the sandbox (at the attempt's end, on every path) kills
 * whatever is left.
 */
export class SandboxHarness implements ExternalAgent {
  private readonly poll = new AbortController();
  private readonly exited: Promise<{ exitCode: number | null }>;
  private result: { exitCode: number | null } | null = null;
  private out = '';
  private stopping: Promise<void> | null = null;

  constructor(
    private readonly sandbox: Sandbox,
    command: string,
    private readonly proxy: LlmProxy,
    readonly limits: { maxLlmCalls?: number | undefined; maxTokensTotal?: number | undefined },
  ) {
    this.exited = this.run(command).then((r) => (this.result = r));
  }

  /** The tail of what the harness printed. */
  get output(): string {
    return this.out;
  }

  /** Its exit code; null while it runs, or when it was stopped or lost. */
  get exitCode(): number | null {
    return this.result?.exitCode ?? null;
  }

  async next(signal: AbortSignal): Promise<ExternalAgentEvent> {
    if (this.result) return { type: 'exit', exitCode: this.result.exitCode };
    if (signal.aborted) throw signal.reason;
    // This is every LLM call's path: no composite signal (AbortSignal.any) and no abort (an
    // AbortError with its stack) per call; the proxy's waiter is withdrawn only when the exit wins.
    const local = new AbortController();
    const onAbort = (): void => local.abort(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    let taken = false;
    const call = this.proxy.next(local.signal).then((c): ExternalAgentEvent => {
      taken = true;
      return { type: 'chat', call: c };
    });
    const exit = this.exited.then((r): ExternalAgentEvent => ({ type: 'exit', exitCode: r.exitCode }));
    // A rejection of the losing side (the proxy waiter withdrawn) is expected and dropped.
    call.catch(() => {});
    try {
      return await Promise.race([call, exit]);
    } finally {
      signal.removeEventListener('abort', onAbort);
      if (!taken) local.abort();
    }
  }

  stop(reason: string): Promise<void> {
    this.stopping ??= (async () => {
      this.proxy.end(reason);
      if (this.result) return;
      this.poll.abort(new Error(`harness stopped: ${reason}`));
      await this.exited;
    })();
    return this.stopping;
  }

  private async run(command: string): Promise<{ exitCode: number | null }> {
    const signal = this.poll.signal;
    try {
      let r = await this.sandbox.bash({ command, timeoutMs: POLL_MS }, signal);
      this.keep(r.output);
      while (r.exitCode === null) {
        r = await this.sandbox.bash({ command: '', timeoutMs: POLL_MS }, signal);
        this.keep(r.output);
      }
      return { exitCode: r.exitCode };
    } catch {
      // Stopped (the aborted call sent Ctrl-C) or the sandbox was lost: make sure it is down.
      return this.kill();
    }
  }

  /** Ctrl-C was sent by the aborted wait; wait a grace, then Ctrl-\, then leave the rest to the sandbox's close. */
  private async kill(): Promise<{ exitCode: number | null }> {
    for (const key of ['', 'C-\\']) {
      try {
        if (key) await this.sandbox.bash({ command: key, isInput: true, timeoutMs: 2_000 });
        const r = await this.sandbox.bash({ command: '', timeoutMs: 2_000 });
        this.keep(r.output);
        if (r.exitCode !== null || !r.timedOut) return { exitCode: null };
      } catch {
        return { exitCode: null };
      }
    }
    return { exitCode: null };
  }

  private keep(text: string): void {
    // The shell tool's notes to a model ("[The command has not finished. ...]") are not the harness's output.
    const own = text.replace(/^\n?\[(?:The command has not finished|No command is running|A command is still running)[^\n]*\]\n?/gm, '');
    if (!own) return;
    this.out += own;
    if (this.out.length > KEEP_OUTPUT) this.out = this.out.slice(-KEEP_OUTPUT);
  }
}
