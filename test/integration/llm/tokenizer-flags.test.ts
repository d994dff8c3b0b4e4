import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ValidationError } from '../../../src/errors.js';
import { createRuntime } from '../../../src/runtime/runtime.js';
import { tinyTokenizerJson } from '../../fixtures/tiny-tokenizer.js';

const ROOT = join(import.meta.dirname, '../../..');

/** Runs `rollout ARGS` to its exit; answers the code and stderr. */
function rollout(args: string[]): Promise<{ code: number | null; stderr: string }> {
  const p = spawn(process.execPath, [join(ROOT, 'bin/rollout.js'), ...args], { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  p.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  return new Promise((resolve) => p.once('exit', (code) => resolve({ code, stderr })));
}

describe('--tokenizer and --tool-parser refuse bad input at start-up, naming the file or name', () => {
  it('serve: a directory without a model', async () => {
    const r = await rollout(['serve', '--port', '0', '--sandbox', 'none', '--tokenizer', '/nonexistent/model-dir']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/rollout serve: tokenizer: \/nonexistent\/model-dir: no such directory/);
  }, 60_000);

  it('fake-llm: an unknown tool parser', async () => {
    const r = await rollout(['fake-llm', '--tool-parser', 'pythonic']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/unknown "pythonic"; known: hermes, qwen3_coder, llama3_json, mistral, deepseek_v3/);
  }, 60_000);

  it('llm-serve --tiny: a vocabulary the tiny GGUF writer cannot write (a byte-level BPE of an unknown split regex)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'odd-vocab-'));
    try {
      const tj = tinyTokenizerJson(['<eos>']) as { pre_tokenizer: unknown };
      tj.pre_tokenizer = { type: 'Split', pattern: { Regex: '[a-z]+' }, behavior: 'Isolated', invert: false };
      writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(tj));
      writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify({ eos_token: '<eos>', chat_template: '{{ messages[0].content }}<eos>' }));
      const r = await rollout(['llm-serve', '--tiny', '--tokenizer', dir]);
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(/odd-vocab-\w+\/tokenizer\.json: its pre-tokenizer is not one the tiny GGUF writer knows/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);

  it('createRuntime: a tokenizer directory without tokenizer.json, as a ValidationError on the tokenizer field', () => {
    let err: unknown;
    try {
      createRuntime({ tokenizer: ROOT, sandboxDriver: 'none' });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).issues[0]!.path).toBe('tokenizer');
    expect((err as Error).message).toContain(`${join(ROOT, 'tokenizer.json')}: missing`);
  });
});
