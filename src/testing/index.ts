export { TestCodec, TEST_TOKENS, TEXT_OFFSET } from './test-codec.js';
export { ScriptedPolicy, type ScriptedPolicyOptions, type ScriptedFailure } from './scripted-policy.js';
export { MemorySandboxProvider, MemorySandbox, type MemorySandboxOptions, type MemorySandboxOp } from './memory-sandbox.js';
export { createTestHandler } from './test-handler.js';
export { ManualClock } from '../clock.js';
