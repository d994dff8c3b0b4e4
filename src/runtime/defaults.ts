import { ValidationError } from '../errors.js';
import type { ChatCodec } from '../llm/chat-codec.js';
import type { LlmClient } from '../llm/llm-client.js';
import { parseBackendAddress } from '../llm/backend-address.js';
import { BackendPool } from '../llm/backend-pool.js';
import { isOracleAddress, OracleBackend } from '../llm/oracle-backend.js';
import { codecFor, type CodecSpec } from '../llm/codec-registry.js';
import { createSandboxProvider } from '../sandbox/index.js';
import type { SandboxProvider } from '../sandbox/sandbox.js';
import type { Clock } from '../clock.js';

let announced = false;

/**
 * The parts a runtime uses when the options leave them out. This file is the ONE place that
 * picks them: the Qwen3 codec, a backend pool over `options.backends` (the oracle backend when
 * they say `oracle`, or — announced once per process — when there are none), and sandbox hosts
 * with the best driver present (bwrap, then unshare). Parts made here are owned by the runtime
 * and closed by `runtime.close()`.
 */
export const defaults = {
  /** @throws ValidationError naming the file and problem when `tokenizer` is not a usable model directory. */
  codec(spec: CodecSpec = {}): ChatCodec {
    return codecFor(spec);
  },
  /**
   * @throws ValidationError naming `backends.<i>` when an address does not parse, or when
   *   `oracle` is mixed with model backends (the service mixes them; a bare runtime does not).
   */
  llm(codec: ChatCodec, clock: Clock, backends: readonly string[]): LlmClient {
    if (backends.length === 0) {
      if (!announced) {
        announced = true;
        process.emitWarning('no LLM backend given: replaying instance.oracle (the oracle backend), not a model; pass backends or llm to sample a policy', { code: 'ROLLOUT_ORACLE_BACKEND' });
      }
      return new OracleBackend({ codec });
    }
    const oracle = backends.findIndex(isOracleAddress);
    if (oracle >= 0) {
      if (backends.length === 1) return new OracleBackend({ codec });
      throw new ValidationError('invalid runtime options: the oracle backend cannot be mixed with model backends', [
        { path: `backends.${oracle}`, message: "'oracle' must be the only backend" },
      ]);
    }
    const specs = backends.map((a, i) => {
      try {
        return parseBackendAddress(a);
      } catch (err) {
        if (!(err instanceof ValidationError)) throw err;
        throw new ValidationError(`invalid runtime options: ${err.message}`, [{ path: `backends.${i}`, message: err.issues[0]?.message ?? err.message }]);
      }
    });
    // The pool's probe timers and latency figures run on the runtime's clock.
    const pool = new BackendPool({}, { timers: clock, now: () => clock.now() });
    // They serve the runtime's own model: a job naming another (custom_tokenizer) is not sent to them.
    for (const s of specs) pool.addBackend({ ...s, codecKey: s.codecKey ?? codec.name });
    return pool;
  },
  sandboxes(driver: 'auto' | 'bwrap' | 'unshare' | 'none'): SandboxProvider {
    return createSandboxProvider({ driver });
  },
};
