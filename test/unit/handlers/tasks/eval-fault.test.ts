import { describe, expect, it } from 'vitest';
import { BackendError, CancelledError, InfraError, RolloutTimeoutError, SandboxError, TaskError, ValidationError } from '../../../../src/errors.js';
import { evalFault, type EvalFault } from '../../../../src/handlers/tasks/eval-fault.js';

describe('evalFault: who answers for a failed eval step (#28 §5.5)', () => {
  const cases: [string, EvalFault, unknown, boolean][] = [
    ['a workspace path the eval cannot write, over the policy\'s patch', 'policy', new TaskError('is a directory', { code: 'WRITE_FAILED' }), true],
    ['a symlink out of the workspace, over the policy\'s patch', 'policy', new TaskError('points outside', { code: 'PATH_OUTSIDE_WORKSPACE' }), true],
    ['an eval command that failed in the policy\'s workspace', 'policy', new SandboxError('git diff failed (exit 128)', { stage: 'eval' }), true],
    ['a runner result that does not parse', 'policy', new SyntaxError('Unexpected token'), true],
    ['a thrown non-error value', 'policy', 'boom', true],
    ['the same write failure over the task\'s data alone', 'rethrow', new TaskError('is a directory', { code: 'WRITE_FAILED' }), false],
    ['a bad instance, over the task\'s data alone', 'rethrow', new ValidationError('bad field', []), false],
    ['a sandbox lost under the eval', 'rethrow', new SandboxError('host died', { code: 'SANDBOX_LOST' }), true],
    ['a sandbox that did not start', 'rethrow', new SandboxError('bwrap failed', { code: 'SANDBOX_START' }), true],
    ['a closed provider', 'rethrow', new SandboxError('closing', { code: 'PROVIDER_CLOSED' }), true],
    ['an unreachable state dir', 'rethrow', new SandboxError('cannot pass /root', { code: 'STATE_DIR_UNREACHABLE' }), true],
    ['a backend fault', 'rethrow', new BackendError('connection refused'), true],
    ['any other infrastructure fault', 'rethrow', new InfraError('runtime closing'), true],
    ['a cancel', 'rethrow', new CancelledError('cancelled'), true],
    ['a timeout', 'rethrow', new RolloutTimeoutError('timed out'), true],
  ];
  it.each(cases)('%s → %s', (_what, want, err, overPolicyWork) => {
    expect(evalFault(err, overPolicyWork)).toBe(want);
  });
});
