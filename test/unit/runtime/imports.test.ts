import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? sources(p) : p.endsWith('.ts') ? [p] : [];
  });
}

/** Relative imports of a file (static, dynamic and re-exports), resolved to .ts paths. */
function importsOf(file: string): string[] {
  // Comment lines may name a module (`{@link import('./x.js').y}`) without importing it.
  const text = readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => !/^\s*(\*|\/\/|\/\*)/.test(l))
    .join('\n');
  const out: string[] = [];
  for (const m of text.matchAll(/(?:from|import)\s*\(?\s*'(\.{1,2}\/[^']+)'/g)) {
    out.push(resolve(dirname(file), m[1]!.replace(/\.js$/, '.ts')));
  }
  return out;
}

const files = [...sources(join(root, 'src')), ...sources(join(root, 'machines'))];
const rel = (p: string): string => relative(root, p);

describe('the layering of src/', () => {
  it('imports src/testing/ only from its own files and the fake-llm command', () => {
    const allowed = (f: string): boolean => rel(f).startsWith('src/testing/') || rel(f) === 'src/cli/commands/fake-llm.ts';
    const offenders = files.filter((f) => !allowed(f) && importsOf(f).some((i) => rel(i).startsWith('src/testing/')));
    expect(offenders.map(rel)).toEqual([]);
  });

  it('keeps machines/ pure: they import only xstate and each other', () => {
    const machines = files.filter((f) => rel(f).startsWith('machines/'));
    for (const f of machines) {
      for (const i of importsOf(f)) expect(rel(i), rel(f)).toMatch(/^machines\//);
    }
  });

  it('has no import cycle', () => {
    const graph = new Map(files.map((f) => [f, importsOf(f).filter((i) => files.includes(i))]));
    const state = new Map<string, 'open' | 'done'>();
    const cycles: string[] = [];
    const visit = (f: string, path: string[]): void => {
      if (state.get(f) === 'done') return;
      if (state.get(f) === 'open') {
        cycles.push([...path.slice(path.indexOf(f)), f].map(rel).join(' → '));
        return;
      }
      state.set(f, 'open');
      for (const i of graph.get(f) ?? []) visit(i, [...path, f]);
      state.set(f, 'done');
    };
    for (const f of files) visit(f, []);
    expect(cycles).toEqual([]);
  });

  it('keeps every file in src/runtime/ at 400 lines or fewer', () => {
    const long = files.filter((f) => rel(f).startsWith('src/runtime/') && readFileSync(f, 'utf8').split('\n').length > 401);
    expect(long.map(rel)).toEqual([]);
  });
});
