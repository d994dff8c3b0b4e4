import { ValidationError } from '../errors.js';
import type { ChatCodec } from '../llm/chat-codec.js';
import type { LlmClient } from '../llm/llm-client.js';
import { parseBackendAddress } from '../llm/backend-address.js';
import { BackendPool } from '../llm/backend-pool.js';
import { codecFor, type CodecSpec } from '../llm/codec-registry.js';
import { createSandboxProvider } from '../sandbox/index.js';
import type { SandboxProvider } from '../sandbox/sandbox.js';
import type { Clock } from './clock.js';
import { ScriptedPolicy } from '../testing/scripted-policy.js';

/**
 * The parts a runtime uses when the options leave them out. This file is the ONE place that
 * picks them: the Qwen3 codec, a backend pool over `options.backends` (the scripted policy
 * when there are none), and sandbox hosts with the best driver present (bwrap, then unshare).
 * Parts made here are owned by the runtime and closed by `runtime.close()`.
 */
export const defaults = {
  /** @throws ValidationError naming the file and problem when `tokenizer` is not a usable model directory. */
  codec(spec: CodecSpec = {}): ChatCodec {
    return codecFor(spec);
  },
  /** @throws ValidationError naming `backends` when an address does not parse. */
  llm(codec: ChatCodec, clock: Clock, backends: readonly string[]): LlmClient {
    if (backends.length === 0) return new ScriptedPolicy({ codec, clock });
    const specs = backends.map((a, i) => {
      try {
        return parseBackendAddress(a);
      } catch (err) {
        if (!(err instanceof ValidationError)) throw err;
        throw new ValidationError(`invalid runtime options: ${err.message}`, [{ path: `backends.${i}`, message: err.issues[0]?.message ?? err.message }]);
      }
    });
    const pool = new BackendPool();
    for (const s of specs) pool.addBackend(s);
    return pool;
  },
  sandboxes(driver: 'auto' | 'bwrap' | 'unshare' | 'none'): SandboxProvider {
    return createSandboxProvider({ driver });
  },
};
