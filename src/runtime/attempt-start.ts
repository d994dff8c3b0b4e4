import type { FinalState } from '../../machines/rollout.machine.js';
import { CancelledError } from '../errors.js';
import { TrajectoryBuilder } from '../llm/trajectory-builder.js';
import type { SandboxProvider } from '../sandbox/sandbox.js';
import type { Clock } from '../clock.js';
import { Attempt } from './attempt.js';
import type { RolloutSession } from './rollout-session.js';
import type { RuntimeOptions } from './runtime-options.js';

/** One shared abort reason per final state: it only tells a handler why its signal fired. */
export const ENDED: Record<FinalState, CancelledError> = {
  done: new CancelledError('rollout done'),
  failed: new CancelledError('rollout failed'),
  timedOut: new CancelledError('rollout timed out'),
  cancelled: new CancelledError('rollout cancelled'),
};

/**
 * A fresh attempt of `s` with its limits, token record and handler context. A branch's one
 * attempt (#26) starts from its fork instead: its parent's token record, sandbox and handler state.
 */
export function newAttempt(s: RolloutSession, opts: RuntimeOptions, provider: SandboxProvider, clock: Clock): Attempt {
  const start = s.takeBranch();
  const att = new Attempt({
    builder: start?.builder ?? new TrajectoryBuilder({ codec: s.codec, detectDrift: opts.detectDrift, enableThinking: s.sampling.enable_thinking }),
    maxIterations: s.sampling.max_iterations ?? opts.maxIterations,
    maxOutputTokens: s.sampling.max_output_tokens ?? opts.maxOutputTokens,
    maxModelLen: s.sampling.max_model_len ?? opts.maxModelLen,
    rollout: s,
    provider,
    clock,
  });
  if (start) att.enterBranch(start);
  return att;
}
