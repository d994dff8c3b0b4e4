import { CancelledError } from '../errors.js';
import type { Sandbox, SandboxProvider, SandboxSpec } from '../sandbox/sandbox.js';

/** What the sandboxes see of their attempt (the attempt itself). */
export interface SandboxesOwner {
  /** The attempt's signal, passed to every creation. */
  readonly signal: AbortSignal;
  /** Whether the attempt has ended: checked before and after each creation. */
  readonly ended: boolean;
  /** A sandbox is ready (counts as the rollout's progress). */
  sandboxReady(): void;
}

/**
 * The sandboxes of one rollout attempt, and their one close path. Every sandbox a handler makes
 * through `ctx.createSandbox` (or returns from `init`) is owned here; {@link closeAll} closes
 * them all when the attempt ends, including ones whose creation is still in flight (they close
 * themselves as soon as they arrive, since nobody else would).
 */
export class AttemptSandboxes {
  // Arrays, not Sets: an attempt has one or a few sandboxes, and an empty Set costs more to make
  // (and reallocates its table when emptied) than a scan of a short array (docs/core.md).
  private readonly open: Sandbox[] = [];
  /** Creations still running, so the end of the attempt can wait for their clean-up. */
  private readonly pending: Promise<unknown>[] = [];

  constructor(
    private readonly provider: SandboxProvider,
    private readonly rolloutId: string,
    private readonly owner: SandboxesOwner,
  ) {}

  /**
   * Makes a sandbox owned by the attempt.
   * @throws CancelledError when the attempt ended before or while the sandbox was starting
   *   (the sandbox is closed first); whatever the provider throws otherwise.
   */
  create(spec: SandboxSpec): Promise<Sandbox> {
    if (this.owner.ended) return Promise.reject(new CancelledError('rollout ended before its sandbox was requested'));
    const p = this.make(spec);
    this.pending.push(p);
    const untrack = (): void => remove(this.pending, p);
    p.then(untrack, untrack);
    return p;
  }

  /** Takes ownership of a sandbox the handler made some other way (returned from `init`). */
  adopt(sb: Sandbox): void {
    if (!this.open.includes(sb)) this.open.push(sb);
  }

  /**
   * Closes every owned sandbox and waits for creations in flight; resolves when all are done,
   * never rejects (a failed close is the provider's to report). Null when there is nothing to
   * wait for. Later {@link create} calls are rejected through the owner's `ended`.
   */
  closeAll(): Promise<void> | null {
    if (this.open.length === 0 && this.pending.length === 0) return null;
    // Sandbox.close never throws by contract; a start still pending rejected to its own caller.
    const closes: Promise<unknown>[] = [];
    for (const sb of this.open) closes.push(sb.close().then(noop, noop));
    this.open.length = 0;
    for (const p of this.pending) closes.push(p.then(noop, noop));
    // One sandbox (the usual case): its close is the wait, without a Promise.all around it.
    return closes.length === 1 ? (closes[0] as Promise<void>) : Promise.all(closes).then(noop);
  }

  private async make(spec: SandboxSpec): Promise<Sandbox> {
    const sb = await this.provider.create(spec, { rolloutId: this.rolloutId, signal: this.owner.signal });
    if (this.owner.ended) {
      // The rollout ended (cancel, timeout) while the sandbox was starting: nobody else will close it.
      await sb.close().catch(() => {});
      throw new CancelledError('rollout ended while its sandbox was starting');
    }
    if (!this.open.includes(sb)) this.open.push(sb);
    this.owner.sandboxReady();
    return sb;
  }
}

function noop(): void {}

/** Removes `x` from `xs` (no-op when absent). */
function remove<T>(xs: T[], x: T): void {
  const i = xs.lastIndexOf(x);
  if (i === xs.length - 1) xs.pop();
  else if (i >= 0) xs.splice(i, 1);
}
