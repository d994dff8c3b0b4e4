import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  BackendError,
  CancelledError,
  InfraError,
  ProtocolError,
  ForkError,
  QueueFullError,
  RolloutError,
  RolloutTimeoutError,
  RuntimeClosedError,
  SandboxError,
  StaleRolloutError,
  TaskError,
  ValidationError,
  deserializeError,
  ERROR_CODES,
  serializeError,
  type ErrorClassName,
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
  ['ForkError', () => new ForkError('ended', { code: 'FORK_ENDED', details })],
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
    const classes = Object.values(mod).filter((v): v is typeof RolloutError => typeof v === 'function' && v.prototype instanceof RolloutError);
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

describe('the error code catalogue', () => {
  /**
   * Makes an error of `cls` carrying `code` (classes with one fixed code ignore it). An infra
   * code listed as not retryable (a configuration mistake: CONTEXT_LIMIT) is thrown with
   * `retryable: false` at its one place; the others take their class's default.
   */
  const fixed = (code: string) => ((ERROR_CODES as Record<string, { class: string; retryable: boolean }>)[code]?.retryable === false ? { retryable: false } : {});
  const make: Record<ErrorClassName, (code: string) => RolloutError> = {
    InfraError: (code) => new InfraError('x', { code, ...fixed(code) }),
    SandboxError: (code) => new SandboxError('x', { code }),
    BackendError: (code) => new BackendError('x', { code, ...fixed(code) }),
    StaleRolloutError: () => new StaleRolloutError('x'),
    TaskError: (code) => new TaskError('x', { code }),
    RolloutTimeoutError: (code) => new RolloutTimeoutError('x', { code }),
    CancelledError: () => new CancelledError(),
    ValidationError: () => new ValidationError('x'),
    QueueFullError: () => new QueueFullError('x'),
    RuntimeClosedError: () => new RuntimeClosedError(),
    ProtocolError: (code) => new ProtocolError('x', { code }),
    ForkError: (code) => new ForkError('x', { code }),
  };

  it('gives every code the class and the retry decision that class makes', () => {
    for (const [code, entry] of Object.entries(ERROR_CODES)) {
      const e = make[entry.class](code);
      expect([e.name, e.code, e.retryable], code).toEqual([entry.class, code, entry.retryable]);
    }
  });

  it('lists every code thrown in src/, with the class that throws it', () => {
    const root = fileURLToPath(new URL('../../src/', import.meta.url));
    const files = (dir: string): string[] =>
      readdirSync(dir).flatMap((f) => (statSync(join(dir, f)).isDirectory() ? files(join(dir, f)) : f.endsWith('.ts') ? [join(dir, f)] : []));
    const thrown: { code: string; cls: string; file: string }[] = [];
    for (const file of files(root)) {
      const text = readFileSync(file, 'utf8');
      // `new SandboxError('…', { code: 'SANDBOX_LOST' … })`: the class, then the first code literal before the call closes.
      for (const m of text.matchAll(/new (\w+Error)\(((?:[^()]|\((?:[^()]|\([^()]*\))*\))*)\)/g)) {
        // A literal, or each side of a conditional (`code: full ? 'CONTEXT_FULL' : 'BACKEND_REJECTED'`).
        const c = /code: (?:'([A-Z][A-Z0-9_]*)'|[\w.]+ \? '([A-Z][A-Z0-9_]*)' : '([A-Z][A-Z0-9_]*)')/.exec(m[2]!);
        for (const code of c ? [c[1], c[2], c[3]] : []) if (code && m[1]! in make) thrown.push({ code, cls: m[1]!, file });
      }
      for (const m of text.matchAll(/image(Task|Infra)Error\('([A-Z][A-Z0-9_]*)'/g)) thrown.push({ code: m[2]!, cls: `${m[1]}Error`, file });
    }
    expect(thrown.length).toBeGreaterThan(40);
    const wrong = thrown.filter((t) => (ERROR_CODES as Record<string, { class: string }>)[t.code]?.class !== t.cls);
    expect(wrong.map((t) => `${t.cls} ${t.code} in ${t.file.slice(root.length)}`)).toEqual([]);
  });
});
