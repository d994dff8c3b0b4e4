import { describe, expect, it } from 'vitest';
import { ValidationError } from '../../../src/errors.js';
import { createRuntime } from '../../../src/runtime/runtime.js';
import { BackendPool } from '../../../src/llm/backend-pool.js';
import { defaults } from '../../../src/runtime/defaults.js';
import { OracleBackend } from '../../../src/llm/oracle-backend.js';
import { TestCodec } from '../../../src/testing/test-codec.js';
import { systemClock } from '../../../src/clock.js';

describe('runtime defaults', () => {
  it('uses the oracle backend when no backend is given, and says so once', async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error): void => void warnings.push(w);
    process.on('warning', onWarning);
    try {
      const a = defaults.llm(new TestCodec(), systemClock, []);
      const b = defaults.llm(new TestCodec(), systemClock, []);
      expect(a).toBeInstanceOf(OracleBackend);
      expect(b).toBeInstanceOf(OracleBackend);
      // process.emitWarning emits on the next tick: an immediate runs after it (an order, not a time).
      await new Promise((r) => setImmediate(r));
      const ours = warnings.filter((w) => (w as Error & { code?: string }).code === 'ROLLOUT_ORACLE_BACKEND');
      expect(ours).toHaveLength(1);
      expect(ours[0]!.message).toMatch(/replaying instance\.oracle/);
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('uses the oracle backend when it is asked for by name', () => {
    expect(defaults.llm(new TestCodec(), systemClock, ['oracle'])).toBeInstanceOf(OracleBackend);
  });

  it('refuses the oracle mixed with model backends, naming its index', () => {
    let err: unknown;
    try {
      createRuntime({ backends: ['http://127.0.0.1:1', 'oracle'], codec: new TestCodec() });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).issues[0]).toMatchObject({ path: 'backends.1', message: "'oracle' must be the only backend" });
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
