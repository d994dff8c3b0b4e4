import type { IntegrityAction, IntegrityDefaults, IntegrityPolicy, IntegrityReport, IntegrityViolation } from '../protocol/integrity.js';
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
 * violations it did see are kept). What secrets reads and denied programs would need is not
 * observed yet (#27): a policy with `secret` or `deny_exec` entries is `degraded` for them.
 */
export class RolloutIntegrity {
  readonly violations: IntegrityViolation[] = [];
  private degraded: string[] = [];
  private active = false;
  private actions = 0;
  private monitorMs = 0;

  constructor(readonly policy: EffectivePolicy) {
    if (policy.secret.length > 0 || policy.denyExec.length > 0) this.degraded.push('reads of secret paths and executed programs are not observed yet');
  }

  /** Takes the baseline of `sandbox`'s workspace. Never throws. */
  async start(sandbox: Sandbox | undefined): Promise<void> {
    if (!sandbox?.integrity) {
      this.degraded.push(sandbox ? 'this sandbox has no integrity monitor' : 'the task has no sandbox');
      return;
    }
    try {
      const r = await sandbox.integrity({ op: 'start', protect: this.policy.protect });
      this.monitorMs += r.ms;
      if (r.truncated) this.degraded.push(`the workspace has more than ${r.entries} entries: changes past them are not seen`);
      this.active = true;
    } catch (e) {
      this.degraded.push(`the monitor did not start: ${(e as Error).message}`);
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
      this.violations.push(...r.violations);
      return r.violations;
    } catch (e) {
      this.active = false;
      this.degraded.push(`an observation failed: ${(e as Error).message}`);
      return [];
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
