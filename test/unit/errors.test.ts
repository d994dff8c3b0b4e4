import { describe, expect, it } from 'vitest';
import {
  BackendError,
  CancelledError,
  InfraError,
  ProtocolError,
  QueueFullError,
  RolloutError,
  RolloutTimeoutError,
  RuntimeClosedError,
  SandboxError,
  StaleRolloutError,
  TaskError,
  ValidationError,
  deserializeError,
  serializeError,
} from '../../src/errors.js';

const details = { kind: 'http-5xx', nested: { a: [1, 2] } };
const cases: [string, () => RolloutError][] = [
  ['InfraError', () => new InfraError('infra', { code: 'X_INFRA', stage: 'init', details })],
  ['SandboxError', () => new SandboxError('sandbox', { code: 'ACTION_TIMEOUT', stage: 'run', details })],
  ['BackendError', () => new BackendError('backend', { code: 'LLM_TIMEOUT', stage: 'run', details, cause: new TaskError('inner', { code: 'CONTEXT_FULL' }) })],
  ['StaleRolloutError', () => new StaleRolloutError('stale', { stage: 'eval', details })],
  ['TaskError', () => new TaskError('task', { code: 'BAD_REWARD', stage: 'eval', details })],
  ['RolloutTimeoutError', () => new RolloutTimeoutError('late', { code: 'WALL_CLOCK', stage: 'run', details })],
  ['CancelledError', () => new CancelledError('stop', { details })],
  ['ValidationError', () => new ValidationError('invalid instance', [{ path: 'instance.data_source', message: 'required' }])],
  ['QueueFullError', () => new QueueFullError('full', { queued: 3, maxQueued: 3 })],
  ['RuntimeClosedError', () => new RuntimeClosedError('closing')],
  ['ProtocolError', () => new ProtocolError('bad frame', { code: 'BAD_FRAME', details })],
];

/** Everything that must survive the trip, as plain data. */
const view = (e: RolloutError): unknown => ({
  cls: e.constructor,
  name: e.name,
  code: e.code,
  message: e.message,
  retryable: e.retryable,
  stage: e.stage,
  details: e.details,
  cause: e.cause instanceof RolloutError ? view(e.cause) : undefined,
  issues: e instanceof ValidationError ? e.issues : undefined,
});

describe('error serialization', () => {
  it('covers every error class the module exports', async () => {
    const mod = await import('../../src/errors.js');
    const classes = Object.values(mod).filter((v) => typeof v === 'function' && v.prototype instanceof RolloutError);
    expect(classes.map((c) => c.name).sort()).toEqual(cases.map(([n]) => n).sort());
  });

  it('round-trips an infrastructure error made not retryable (a configuration mistake such as CONTEXT_LIMIT)', () => {
    for (const e of [new BackendError('context', { code: 'CONTEXT_LIMIT', stage: 'run', retryable: false }), new InfraError('config', { retryable: false })]) {
      const back = deserializeError(JSON.parse(JSON.stringify(serializeError(e))));
      expect([back.constructor, back.retryable, back.code]).toEqual([e.constructor, false, e.code]);
    }
  });

  it.each(cases)('round-trips a %s with its class, code, stage, details and cause intact', (_name, make) => {
    const e = make();
    // Through JSON, as across a process boundary.
    const back = deserializeError(JSON.parse(JSON.stringify(serializeError(e))));
    expect(view(back)).toEqual(view(e));
  });

  it('keeps the name, code and retryability of a class this process does not know', () => {
    const back = deserializeError({ name: 'GpuOnFireError', code: 'GPU', message: 'hot', retryable: true, details: { t: 99 } });
    expect(back).toBeInstanceOf(RolloutError);
    expect({ name: back.name, code: back.code, retryable: back.retryable, details: back.details }).toEqual({ name: 'GpuOnFireError', code: 'GPU', retryable: true, details: { t: 99 } });
  });
});
