import { chmodSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { createRuntime, type EmbeddedRuntime } from '../../../src/runtime/runtime.js';
import { createSandboxProvider } from '../../../src/sandbox/index.js';
import type { SandboxProvider } from '../../../src/sandbox/sandbox.js';
import { testDriver } from './helpers.js';

/**
 * A runtime on real sandboxes (the test driver, a state dir of its own) and the oracle backend
 * replaying each instance's scripted policy, made before the file's tests and closed after them,
 * state dir included. One attempt per rollout: an infra error would otherwise be retried (and
 * look like a slow success). Call at the file's top level; `submit` is the runtime's.
 */
export function oracleRuntimeOnSandboxes(prefix: string, opts: { hosts?: number } = {}): Pick<EmbeddedRuntime, 'submit'> {
  let root: string | undefined;
  let provider: SandboxProvider | undefined;
  let runtime: EmbeddedRuntime | undefined;
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), prefix));
    // The sandbox uid walks through the state dir to its sandbox's directory.
    chmodSync(root, 0o711);
    provider = createSandboxProvider({ driver: testDriver(), stateDir: root, hosts: opts.hosts ?? 1 });
    runtime = createRuntime({ backends: ['oracle'], sandboxes: provider, retries: { max: 0 } });
  });
  afterAll(async () => {
    await runtime?.close();
    await provider?.close();
    if (root) await rm(root, { recursive: true, force: true });
  });
  return {
    submit: (...args) => {
      if (!runtime) throw new Error('the runtime is made before the first test (beforeAll)');
      return runtime.submit(...args);
    },
  };
}
