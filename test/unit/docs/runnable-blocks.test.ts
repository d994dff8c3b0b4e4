import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const docs = ['README.md', ...readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];

/** The package's public entry points, as the blocks import them. */
const entries: Record<string, string> = {
  'rollout-runtime': 'src/index.ts',
  'rollout-runtime/testing': 'src/testing/index.ts',
};

/** Every ```ts runnable block: file, line, code. */
function runnableBlocks(): { file: string; line: number; code: string }[] {
  const out: { file: string; line: number; code: string }[] = [];
  for (const file of docs) {
    const lines = readFileSync(join(root, file), 'utf8').split('\n');
    for (let i = 0; i < lines.length; i++) {
      if (!/^```ts\s+runnable\s*$/.test(lines[i]!)) continue;
      const end = lines.findIndex((l, j) => j > i && l.startsWith('```'));
      out.push({ file, line: i + 1, code: lines.slice(i + 1, end).join('\n') });
      i = end;
    }
  }
  return out;
}

// Blocks are written inside the repository so their imports resolve like a user's would.
mkdirSync(join(root, 'test-output'), { recursive: true });
const dir = mkdtempSync(join(root, 'test-output', 'runnable-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('runnable code blocks of the README and docs', () => {
  const blocks = runnableBlocks();

  it('finds at least the core quick start', () => {
    expect(blocks.map((b) => b.file)).toContain('docs/core.md');
  });

  it.each(blocks.map((b) => [`${b.file}:${b.line}`, b] as const))('runs %s to the end', async (_name, b) => {
    const code = b.code.replace(/from '(rollout-runtime(?:\/testing)?)'/g, (m, spec: string) => {
      const target = entries[spec];
      return target ? `from '${relative(dir, join(root, target)).replace(/\.ts$/, '.js')}'` : m;
    });
    const file = join(dir, `${b.file.replace(/[/.]/g, '_')}_${b.line}.ts`);
    // A module of its own: top-level await, no name clashes between blocks.
    writeFileSync(file, `${code}\nexport {};\n`);
    await import(pathToFileURL(file).href);
    // Loading the Qwen3 tokenizer dominates: generous for a loaded CI machine.
  }, 180_000);
});
