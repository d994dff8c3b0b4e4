import type { FinalState } from '../../machines/rollout.machine.js';
import { CancelledError } from '../errors.js';
import { TrajectoryBuilder } from '../llm/trajectory-builder.js';
import type { HandlerContext } from '../proxy/agent-contract.js';
import type { SandboxProvider } from '../sandbox/sandbox.js';
import type { Clock } from '../clock.js';
import { enterBranch } from './rollout-fork.js';
import { Attempt, type RolloutSession } from './rollout-session.js';
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
  const att = new Attempt(
    start?.builder ?? new TrajectoryBuilder({ codec: s.codec, detectDrift: opts.detectDrift, enableThinking: s.sampling.enable_thinking }),
    s.sampling.max_iterations ?? opts.maxIterations,
    s.sampling.max_output_tokens ?? opts.maxOutputTokens,
    s.sampling.max_model_len ?? opts.maxModelLen,
    { provider, rolloutId: s.id, clock },
  );
  att.ctx = handlerContext(s, att, clock);
  if (start) enterBranch(att, start);
  return att;
}

/** The context every handler call of an attempt shares; its sandboxes go to the attempt's owner. */
function handlerContext(s: RolloutSession, att: Attempt, clock: Clock): HandlerContext {
  return { rolloutId: s.id, instance: s.instance, sampling: s.sampling, signal: att.signal, clock, createSandbox: (spec) => att.sandboxes.create(spec) };
}
