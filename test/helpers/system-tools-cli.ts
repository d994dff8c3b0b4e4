/**
 * What scripts/hide-tools.sh and .ci/run ask of the system-tool registry (issue #28):
 *
 *   tsx test/helpers/system-tools-cli.ts paths   the files to white out, one a line
 *   tsx test/helpers/system-tools-cli.ts tests   the test files that import system-tools.ts,
 *                                                directly or through another test helper
 */
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pathsToHide } from './system-tools.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const REGISTRY = join(ROOT, 'test/helpers/system-tools.ts');

function tsFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isDirectory()) return e.name === 'node_modules' || e.name === 'fixtures' ? [] : tsFiles(p);
    return e.name.endsWith('.ts') ? [p] : [];
  });
}

/** Test files under test/ that reach the registry through relative imports inside test/. */
export function testsUsingTools(): string[] {
  const files = tsFiles(join(ROOT, 'test'));
  const importsOf = new Map<string, string[]>();
  for (const f of files) {
    const specs = [...readFileSync(f, 'utf8').matchAll(/(?:from|import)\s*\(?\s*'(\.{1,2}\/[^']+)'/g)].map((m) => m[1] ?? '');
    importsOf.set(
      f,
      specs.map((s) => resolve(dirname(f), s).replace(/\.js$/, '.ts')),
    );
  }
  const reaches = new Set<string>([REGISTRY]);
  for (let grew = true; grew; ) {
    grew = false;
    for (const [f, deps] of importsOf) {
      if (!reaches.has(f) && deps.some((d) => reaches.has(d))) {
        reaches.add(f);
        grew = true;
      }
    }
  }
  return [...reaches].filter((f) => f.endsWith('.test.ts')).map((f) => relative(ROOT, f)).sort();
}

const what = process.argv[2];
if (what === 'paths') console.log(pathsToHide().join('\n'));
else if (what === 'tests') console.log(testsUsingTools().join('\n'));
else {
  console.error('usage: tsx test/helpers/system-tools-cli.ts paths|tests');
  process.exit(2);
}
