import { fileURLToPath } from 'node:url';
import { ESLint } from 'eslint';
import { beforeAll, describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../../', import.meta.url));

/**
 * The project's config as `npm run lint` loads it, less type information: a fixture that exists
 * only as text is in no TypeScript project, so the type-aware rules (which need one) are off
 * here. Every rule these tests read is syntactic.
 */
function projectLinter(): ESLint {
  return new ESLint({
    cwd: root,
    overrideConfig: {
      files: ['**/*.ts'],
      languageOptions: { parserOptions: { projectService: false } },
      rules: Object.fromEntries(['no-floating-promises', 'no-misused-promises', 'await-thenable'].map((r) => [`@typescript-eslint/${r}`, 'off'])),
    },
  });
}

/**
 * `npm run lint` is `eslint .` with the project's eslint.config.js; these lint source text as if it
 * were a file at the given path, through the same config, and read the boundaries rule's verdict.
 */
describe('the layer order is enforced by the linter', () => {
  let eslint: ESLint;
  beforeAll(() => {
    eslint = projectLinter();
  });

  async function layerErrors(filePath: string, code: string): Promise<string[]> {
    const [result] = await eslint.lintText(code, { filePath: `${root}${filePath}` });
    expect(result!.messages.filter((m) => m.fatal)).toEqual([]);
    return result!.messages.filter((m) => m.ruleId === 'boundaries/dependencies').map((m) => m.message);
  }

  it('fails an upward import (handlers importing the runtime)', async () => {
    const errors = await layerErrors('src/handlers/upward-fixture.ts', "import { Runtime } from '../runtime/runtime.js';\nexport const r = Runtime;\n");
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatch(/^upward import: handlers may import only/);
  });

  it('fails a ground-floor file importing any layer', async () => {
    const errors = await layerErrors('src/upward-fixture.ts', "import { SandboxError } from './errors.js';\nimport { LlmProxy } from './proxy/llm-proxy.js';\nexport const r = [SandboxError, LlmProxy];\n");
    expect(errors).toHaveLength(1);
  });

  it('fails an import between the two sides of one floor (llm and ipc)', async () => {
    expect(await layerErrors('src/llm/side-fixture.ts', "export * from '../ipc/index.js';\n")).toHaveLength(1);
  });

  it('fails a product file importing the test doubles, and a machine importing src/', async () => {
    expect(await layerErrors('src/runtime/testing-fixture.ts', "export * from '../testing/index.js';\n")).toHaveLength(1);
    expect(await layerErrors('machines/impure-fixture.ts', "export * from '../src/clock.js';\n")).toHaveLength(1);
  });

  it('passes downward imports, same-folder imports and packages', async () => {
    const code = [
      "import { readFile } from 'node:fs/promises';",
      "import { setup } from 'xstate';",
      "import { systemClock } from '../clock.js';",
      "import type { AgentHandler } from '../proxy/agent-contract.js';",
      "import { Supervisor } from './supervisor.js';",
      "import { rolloutMachine } from '../../machines/rollout.machine.js';",
      'export const r = [readFile, setup, systemClock, Supervisor, rolloutMachine];',
      'export type H = AgentHandler;',
      '',
    ].join('\n');
    expect(await layerErrors('src/runtime/downward-fixture.ts', code)).toEqual([]);
  });
});

describe('time is read through the injected clock', () => {
  let eslint: ESLint;
  beforeAll(() => {
    eslint = projectLinter();
  });

  async function clockErrors(filePath: string, code: string): Promise<string[]> {
    const [result] = await eslint.lintText(code, { filePath: `${root}${filePath}` });
    expect(result!.messages.filter((m) => m.fatal)).toEqual([]);
    return result!.messages.filter((m) => m.ruleId === 'no-restricted-globals' || m.ruleId === 'no-restricted-properties').map((m) => m.message);
  }

  it('fails global timers, Date.now and performance.now in the runtime process', async () => {
    const code = 'export const t = [setTimeout(() => {}, 1), setInterval(() => {}, 1), Date.now(), performance.now()];\n';
    const errors = await clockErrors('src/cluster/clock-fixture.ts', code);
    expect(errors).toHaveLength(4);
    expect(errors[0]).toMatch(/injected Clock/);
  });

  it('passes them in the clock module, the CLI and the sandbox host process', async () => {
    const code = 'export const t = [setTimeout(() => {}, 1), Date.now()];\n';
    for (const file of ['src/clock.ts', 'src/cli/clock-fixture.ts', 'src/sandbox/pty-session.ts']) expect(await clockErrors(file, code), file).toEqual([]);
  });
});
