/**
 * The `@huggingface/jinja` this repository installs, without our patch
 * (`patches/@huggingface+jinja+<version>.patch`, applied by `npm ci` through patch-package): the
 * installed dist files copied to a temp dir and reverse-patched there with `git apply -R`, then
 * imported. For checking the patched interpreter against the original, in the same process
 * (test/unit/llm/jinja-patch.test.ts, bench/chat-template.ts).
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type * as Jinja from '@huggingface/jinja';

const ROOT = join(import.meta.dirname, '../..');
const PKG = 'node_modules/@huggingface/jinja';

/** The patch file for the installed version. */
function jinjaPatchPath(): string {
  const { version } = JSON.parse(readFileSync(join(ROOT, PKG, 'package.json'), 'utf8')) as { version: string };
  const name = `@huggingface+jinja+${version}.patch`;
  if (!readdirSync(join(ROOT, 'patches')).includes(name)) throw new Error(`no patches/${name} for the installed @huggingface/jinja ${version}: update the patch (npx patch-package @huggingface/jinja)`);
  return join(ROOT, 'patches', name);
}

/** The original library's module, loaded from a reverse-patched copy (the temp copy is removed once loaded). */
export async function loadPristineJinja(): Promise<typeof Jinja> {
  const dir = mkdtempSync(join(tmpdir(), 'pristine-jinja-'));
  try {
    mkdirSync(join(dir, PKG, 'dist'), { recursive: true });
    for (const f of ['package.json', 'dist/index.js', 'dist/index.cjs']) copyFileSync(join(ROOT, PKG, f), join(dir, PKG, f));
    const patch = jinjaPatchPath();
    try {
      execFileSync('git', ['apply', '-R', patch], { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
    } catch (e) {
      throw new Error(`the installed @huggingface/jinja is not patched with ${patch} (npm ci applies it; or run npx patch-package): ${String((e as { stderr?: unknown }).stderr ?? e)}`, { cause: e });
    }
    return (await import(pathToFileURL(join(dir, PKG, 'dist/index.js')).href)) as typeof Jinja;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
