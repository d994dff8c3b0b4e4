import { describe, expect, it } from 'vitest';
import { ValidationError } from '../../../src/errors.js';
import { createRuntime } from '../../../src/runtime/runtime.js';
import { BackendPool } from '../../../src/llm/backend-pool.js';
import { defaults } from '../../../src/runtime/defaults.js';
import { ScriptedPolicy } from '../../../src/testing/scripted-policy.js';
import { TestCodec } from '../../../src/testing/test-codec.js';
import { systemClock } from '../../../src/runtime/clock.js';

describe('runtime defaults', () => {
  it('uses the scripted policy when no backend is given', async () => {
    const llm = defaults.llm(new TestCodec(), systemClock, []);
    expect(llm).toBeInstanceOf(ScriptedPolicy);
    await llm.close?.();
  });

  it('makes a backend pool over the given addresses', async () => {
    const llm = defaults.llm(new TestCodec(), systemClock, ['vllm+http://127.0.0.1:1', '127.0.0.1:2']);
    expect(llm).toBeInstanceOf(BackendPool);
    const pool = llm as BackendPool;
    expect(pool.listBackends().map((b) => [b.protocol, b.url])).toEqual([
      ['vllm', 'http://127.0.0.1:1'],
      ['prorl', 'http://127.0.0.1:2'],
    ]);
    await pool.close();
  });

  it('refuses a bad backend address naming its index in the options', () => {
    let err: unknown;
    try {
      createRuntime({ backends: ['http://127.0.0.1:1', 'ftp://x'], codec: new TestCodec() });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).issues[0]?.path).toBe('backends.1');
  });

  it('refuses an unknown sandbox driver naming the field', () => {
    expect(() => createRuntime({ sandboxDriver: 'docker' as never })).toThrow(/sandboxDriver/);
  });
});
