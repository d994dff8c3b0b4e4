import { CancelledError, InfraError, RolloutTimeoutError, SandboxError } from '../../errors.js';

/**
 * Codes of a {@link SandboxError} that mean the sandbox itself is gone or could not be made: the
 * infrastructure's fault whatever the policy did (it cannot kill its host, close its provider or
 * fail a tmpfs mount from inside).
 */
const SANDBOX_GONE: ReadonlySet<string> = new Set(['SANDBOX_LOST', 'SANDBOX_CLOSED', 'PROVIDER_CLOSED', 'SANDBOX_START', 'SANDBOX_FS', 'SANDBOX_EXISTS', 'STATE_DIR_UNREACHABLE', 'ACTION_TIMEOUT']);

/** Who answers for an eval step that threw: see {@link evalFault}. */
export type EvalFault =
  /** The policy's doing: score the rollout (reward 0), keep the error in the eval's details. */
  | 'policy'
  /** Not the policy's: rethrow (task-error, infra-error, cancel or timeout as the error says). */
  | 'rethrow';

/**
 * Decides who answers for a failed eval step (issue #28 §5.5). Pure. `overPolicyWork` says whether
 * the step ran over what the policy made: its own sandbox after its run, or a fresh sandbox after
 * its patch or solution went in. Over the task's data alone, nothing is the policy's.
 *
 * Over the policy's work, a workspace file the eval cannot read or write (a `TaskError`: a test
 * file turned into a directory, a symlink out of the workspace), a command of the eval that failed
 * (a `SandboxError` without a code of its own), or anything else that is not an infrastructure
 * error (a runner's result that does not parse) is the policy's outcome: scored, never filtered —
 * filtering it would let a policy hide a losing episode. Still rethrown: cancels and timeouts, a
 * sandbox that is gone or could not start ({@link SANDBOX_GONE}), and every other infrastructure
 * fault (a backend, the runtime).
 */
export function evalFault(err: unknown, overPolicyWork: boolean): EvalFault {
  if (!overPolicyWork) return 'rethrow';
  if (err instanceof CancelledError || err instanceof RolloutTimeoutError) return 'rethrow';
  if (err instanceof SandboxError) return SANDBOX_GONE.has(err.code) ? 'rethrow' : 'policy';
  if (err instanceof InfraError) return 'rethrow';
  // A TaskError here is about a workspace path the policy shaped; anything else (a parse error) too.
  return 'policy';
}

/** The message of a thrown value, for an eval's details. */
export function faultMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
