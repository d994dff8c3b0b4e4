import { execMatcher, MAX_REPORTED_EXECS, type FileObservationResult, type IntegrityAction, type IntegrityDefaults, type IntegrityPolicy, type IntegrityReport, type IntegrityViolation } from '../protocol/integrity.js';
import type { RolloutResult } from '../protocol/trajectory.js';
import type { Sandbox } from '../sandbox/sandbox.js';
import { integrityCost, maskTurnsAfter } from './integrity-cost.js';

/** The policy a rollout runs under: the instance's lists plus (unless `defaults: false`) its family's. */
export interface EffectivePolicy {
  protect: string[];
  secret: string[];
  denyExec: string[];
  action: IntegrityAction;
}

/**
 * The effective policy of a rollout, or null when there is none (no `integrity` field and no
 * family default): then no monitor runs and the result has no `integrity`. Pure.
 */
export function effectivePolicy(own: IntegrityPolicy | undefined, family: IntegrityDefaults | null | undefined): EffectivePolicy | null {
  if (!own && !family) return null;
  const fam = own?.defaults === false ? null : family;
  const uniq = (a: string[]): string[] => [...new Set(a)];
  return {
    protect: uniq([...(fam?.protect ?? []), ...(own?.protect ?? [])]),
    secret: uniq([...(fam?.secret ?? []), ...(own?.secret ?? [])]),
    denyExec: uniq(own?.deny_exec ?? []),
    action: own?.on_violation ?? 'flag',
  };
}

/**
 * One attempt's monitor, runtime side: starts the sandbox's file monitor after the sandbox's
 * setup (before the agent's first action), observes once per action, and keeps the evidence.
 * It never fails a rollout by itself: a sandbox without a monitor, a start or an observation
 * that fails, or a scan that hit its bound make it `degraded` with the reason stated (the
 * violations it did see are kept), and so does a host that cannot observe what the policy needs
 * (secret reads for `secret`, executed programs for `deny_exec`, network attempts always).
 * Executed programs are matched against `deny_exec` here and listed in the report (bounded).
 */
export class RolloutIntegrity {
  readonly violations: IntegrityViolation[] = [];
  private degraded: string[] = [];
  private active = false;
  private actions = 0;
  private monitorMs = 0;
  private readonly denied: (argv: readonly string[]) => string | null;
  private readonly execs: NonNullable<IntegrityReport['execs']> = [];
  private execsDropped = 0;
  /** The observation of the last action, not awaited yet ({@link observeInBackground}). */
  private pending: Promise<unknown> | null = null;

  constructor(readonly policy: EffectivePolicy) {
    this.denied = execMatcher(policy.denyExec);
  }

  /** Takes the baseline of `sandbox`'s workspace. Never throws. */
  async start(sandbox: Sandbox | undefined): Promise<void> {
    if (!sandbox?.integrity) {
      this.degraded.push(sandbox ? 'this sandbox has no integrity monitor' : 'the task has no sandbox');
      return;
    }
    try {
      const r = await sandbox.integrity({ op: 'start', protect: this.policy.protect, secret: this.policy.secret });
      this.monitorMs += r.ms;
      if (r.truncated) this.degraded.push(`the workspace has more than ${r.entries} entries: changes past them are not seen`);
      this.unobserved(r);
      this.active = true;
    } catch (e) {
      this.degraded.push(`the monitor did not start: ${(e as Error).message}`);
    }
  }

  /**
   * Observes the action after assistant turn `turn` without waiting for it: the request is on
   * the sandbox's socket before any later one, so the host observes exactly this action while
   * the next LLM call runs. {@link settle} waits for it (before the next action, the eval, or
   * the result). Never throws.
   */
  observeInBackground(sandbox: Sandbox | undefined, turn: number): void {
    const prev = this.pending;
    const p = this.observe(sandbox, turn);
    this.pending = prev ? Promise.all([prev, p]) : p;
  }

  /** Waits for the observations started by {@link observeInBackground}. Never throws. */
  async settle(): Promise<void> {
    while (this.pending) {
      const p = this.pending;
      await p;
      if (this.pending === p) this.pending = null;
    }
  }

  /** Observes the action after assistant turn `turn`. @returns the violations it found (also kept). Never throws. */
  async observe(sandbox: Sandbox | undefined, turn: number): Promise<IntegrityViolation[]> {
    if (!this.active || !sandbox?.integrity) return [];
    try {
      const r = await sandbox.integrity({ op: 'observe', turn });
      this.actions++;
      this.monitorMs += r.ms;
      if (r.truncated && !this.degraded.some((d) => d.startsWith('a scan stopped'))) this.degraded.push(`a scan stopped at ${r.entries} entries`);
      this.unobserved(r);
      const found = [...r.violations];
      for (const { argv } of r.execs ?? []) {
        if (this.execs.length < MAX_REPORTED_EXECS) this.execs.push({ turn, argv });
        else this.execsDropped++;
        const rule = argv ? this.denied(argv) : null;
        if (rule) found.push({ kind: 'exec-denied', turn, argv: argv!.slice(0, 50).map((a) => a.slice(0, 500)), detail: `ran a program deny_exec refuses ('${rule}')` });
      }
      this.violations.push(...found);
      return found;
    } catch (e) {
      this.active = false;
      this.degraded.push(`an observation failed: ${(e as Error).message}`);
      return [];
    }
  }

  /** Notes, once each, what the host cannot observe that this policy needs. */
  private unobserved(r: FileObservationResult): void {
    for (const u of r.unobserved ?? []) {
      const needed = u.what === 'network' || (u.what === 'reads' && this.policy.secret.length > 0) || (u.what === 'exec' && this.policy.denyExec.length > 0);
      const line = `${u.what === 'exec' ? 'executed programs' : u.what === 'reads' ? 'secret reads' : 'network attempts'} not observed: ${u.why}`;
      if (needed && !this.degraded.includes(line)) this.degraded.push(line);
    }
  }

  /** The report for the result. */
  report(): IntegrityReport {
    return {
      violations: this.violations,
      action: this.policy.action,
      mode: this.degraded.length === 0 ? 'full' : 'degraded',
      ...(this.degraded.length > 0 ? { reason: this.degraded.join('; ') } : {}),
      actions: this.actions,
      monitorMs: Math.round(this.monitorMs * 1000) / 1000,
      execs: this.execs,
      ...(this.execsDropped > 0 ? { execsDropped: this.execsDropped } : {}),
    };
  }
}

/**
 * The result with the monitor's report and what the violations cost: `zero` sets a graded
 * reward to 0 and says why in `evalDetails.integrity`; `mask` zeroes the loss mask of the turns
 * after the first violation; `fail` was applied when it happened (the rollout ended as a task
 * error), and `flag` only records. Pure apart from returning a changed copy.
 */
export function withIntegrity(result: RolloutResult, integ: RolloutIntegrity): RolloutResult {
  const report = integ.report();
  const cost = integrityCost(report.action, report.violations, result.reward);
  const out: RolloutResult = { ...result, integrity: report };
  if (cost.reason !== null && report.action === 'zero' && result.reward !== null) {
    out.reward = cost.reward;
    out.resolved = false;
    out.evalDetails = { ...(result.evalDetails ?? {}), integrity: cost.reason, rewardBeforeIntegrity: result.reward };
  }
  if (cost.maskAfterTurn !== null) {
    out.trajectory = { ...result.trajectory, lossMask: maskTurnsAfter(result.trajectory, cost.maskAfterTurn) };
    out.evalDetails = { ...(out.evalDetails ?? {}), integrity: cost.reason };
  }
  return out;
}
