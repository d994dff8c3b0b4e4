import type { ChatCodec } from '../llm/chat-codec.js';
import type { LlmClient } from '../llm/llm-client.js';
import type { SandboxProvider } from '../sandbox/sandbox.js';
import type { Clock } from './clock.js';
import { TestCodec } from '../testing/test-codec.js';
import { ScriptedPolicy } from '../testing/scripted-policy.js';
import { MemorySandboxProvider } from '../testing/memory-sandbox.js';

/**
 * The parts a runtime uses when the options leave them out. This file is the ONE place that
 * picks them: for now the in-process fakes (test codec, scripted policy, memory sandbox); at
 * integration they become the Qwen3 codec, the backend pool and the bwrap sandbox hosts.
 * Parts made here are owned by the runtime and closed by `runtime.close()`.
 */
export const defaults = {
  codec(): ChatCodec {
    return new TestCodec();
  },
  llm(codec: ChatCodec, clock: Clock): LlmClient {
    return new ScriptedPolicy({ codec, clock });
  },
  sandboxes(clock: Clock): SandboxProvider {
    return new MemorySandboxProvider({ clock });
  },
};
