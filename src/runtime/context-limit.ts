import { BackendError, TaskError } from '../errors.js';

/**
 * When the context limit is a configuration mistake rather than a rollout's honest end.
 *
 * A rollout whose own token count reaches `max_model_len` after sampling stops as `context_full`
 * (truncated, evaluated: the policy used the context up). Two other cases used to end the same
 * way and were scored 0 as trainable samples although nothing was learned:
 * - the engine refused a call for length although our own count left room: our idea of the
 *   context (`max_model_len`, `max_tokens`) disagrees with the engine's (`--max-tokens 100000`
 *   against a 2,048-token server refused every first call);
 * - the first prompt alone does not fit, so nothing is ever sampled.
 * Both are `infra-error` with the code `CONTEXT_LIMIT`, naming the numbers, and not retried
 * (another attempt would be refused the same way).
 */
export function contextLimitError(what: { promptTokens: number; maxTokens: number; maxModelLen: number; engine?: string | undefined }): BackendError {
  const numbers = `the prompt is ${what.promptTokens} tokens, max_tokens ${what.maxTokens}, this rollout's max_model_len ${what.maxModelLen}`;
  const message = what.engine !== undefined
    ? `the engine refused the call for its context length (${numbers}; engine: ${what.engine.slice(0, 200)}): set max_model_len to the engine's context and max_tokens below it`
    : `the first prompt does not fit the context before anything was sampled (${numbers}): raise max_model_len to the engine's context or shorten the prompt`;
  return new BackendError(message, { code: 'CONTEXT_LIMIT', stage: 'run', retryable: false, details: { promptTokens: what.promptTokens, maxTokens: what.maxTokens, maxModelLen: what.maxModelLen } });
}

/** True for a backend's refusal of a call because prompt + max_tokens exceed its context. */
export function isEngineLengthRefusal(err: unknown): err is TaskError {
  return err instanceof TaskError && err.code === 'CONTEXT_FULL';
}
