import { systemClock, unref, type Clock, type TimerHandle } from '../clock.js';
import type { RolloutResult } from '../protocol/trajectory.js';

/** Sandbox error codes that say nothing about this node's health (it is closing). */
const NOT_A_HEALTH_SIGNAL: ReadonlySet<string> = new Set(['PROVIDER_CLOSED', 'SANDBOX_CLOSED']);

/**
 * The sandbox fault in a rollout's result that may mean this node cannot run sandboxes (issue #28
 * §4), or null. Pure. Only an infra-error whose error is a `SandboxError` counts: a task's own
 * failure, a backend fault or a policy's outcome says nothing about the node.
 */
export function sandboxFault(result: Pick<RolloutResult, 'outcome' | 'error'>): string | null {
  const e = result.error;
  if (result.outcome !== 'infra-error' || !e || e.name !== 'SandboxError' || NOT_A_HEALTH_SIGNAL.has(e.code)) return null;
  return `${e.code}: ${e.message}`.slice(0, 500);
}

/** What {@link NodeHealth} needs from its node. */
export interface NodeHealthDeps {
  /** Starts one sandbox and closes it; rejects when the node cannot run one. */
  probe: () => Promise<void>;
  /** Stop taking jobs (the BullMQ worker's pause; running jobs go on). */
  pause: () => void;
  /** Take jobs again (the node decides whether the cluster itself is paused). */
  resume: () => void;
  /** The period of the probe while unhealthy. */
  probeMs: number;
  log: (line: string) => void;
  /** The node's clock (the probe period). Default the system clock. */
  clock?: Clock | undefined;
}

/**
 * A worker node's sandbox health (issue #28 §4: a node whose sandboxes failed kept taking jobs and
 * failed each one). After a sandbox fault the node stops taking jobs and probes at once: a probe
 * that passes means the fault was the job's (the node resumes, the result stands); one that fails
 * makes the node unhealthy — it takes no job, hands the failed one back for another node, and
 * probes every `probeMs` until a sandbox starts again, then resumes. Faults that arrive while a
 * probe runs share it.
 */
export class NodeHealth {
  private reason: string | null = null;
  private probing: Promise<boolean> | null = null;
  private timer: TimerHandle | null = null;
  private closed = false;

  private readonly clock: Clock;

  constructor(private readonly deps: NodeHealthDeps) {
    this.clock = deps.clock ?? systemClock;
  }

  /** Why the node takes no jobs, or null while it is healthy. */
  get unhealthy(): string | null {
    return this.reason;
  }

  /**
   * Reports a sandbox fault. Resolves true when the node can still run sandboxes (the fault was
   * the job's), false when it cannot (the caller hands the job back). Never rejects.
   */
  report(fault: string): Promise<boolean> {
    if (this.closed) return Promise.resolve(true);
    if (this.reason !== null) return Promise.resolve(false);
    this.probing ??= (async () => {
      this.deps.pause();
      if (await this.probeOnce()) {
        if (!this.closed) this.deps.resume();
        return true;
      }
      this.reason = fault;
      this.deps.log(`unhealthy, taking no jobs until a probe sandbox starts: ${fault}`);
      this.schedule();
      return false;
    })().finally(() => {
      this.probing = null;
    });
    return this.probing;
  }

  /** Stops probing. */
  close(): void {
    this.closed = true;
    if (this.timer) this.clock.clearTimeout(this.timer);
    this.timer = null;
  }

  /** The last probe failure logged: a node that stays down logs each new reason once, not every period. */
  private lastFailure = '';

  private async probeOnce(): Promise<boolean> {
    try {
      await this.deps.probe();
      this.lastFailure = '';
      return true;
    } catch (err) {
      const message = (err as Error).message;
      if (message !== this.lastFailure) this.deps.log(`probe sandbox failed: ${message}`);
      this.lastFailure = message;
      return false;
    }
  }

  private schedule(): void {
    if (this.closed) return;
    this.timer = unref(this.clock.setTimeout(() => {
      this.timer = null;
      // Never rejects: probeOnce logs a failure and answers false.
      void this.probeOnce().then((ok) => {
        if (this.closed) return;
        if (!ok) return this.schedule();
        this.reason = null;
        this.deps.log('healthy again: a probe sandbox started; taking jobs');
        this.deps.resume();
      });
    }, this.deps.probeMs));
  }
}
