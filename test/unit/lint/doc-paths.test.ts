import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../../', import.meta.url));

/**
 * Paths the docs name that are not this repository's, each with whose it is (a reference to
 * another project's file is not a broken one), and placeholder names.
 */
const EXTERNAL = new Map([
  ['src/polar', "NVIDIA-NeMo/ProRL-Agent-Server's package (docs/polar.md)"],
  ['src/slime_bridge', "NVIDIA-NeMo/ProRL-Agent-Server's slime bridge (docs/polar.md)"],
  ['bin/test', "sympy's test runner, inside a SWE image (docs/images.md, docs/polar.md)"],
  ['x.ts', 'a placeholder name (README: the resolver maps `./x.js` to `x.ts`)'],
]);

const TOP = '(?:src|test|docs|bench|examples|scripts|machines|visualizer|bin|patches)';

/** What `git ls-files` lists, and every directory on the way: the repository as committed. */
function repository(): { has(p: string): boolean; hasName(name: string): boolean } {
  const files = execFileSync('git', ['ls-files'], { cwd: root, encoding: 'utf8' }).split('\n').filter(Boolean);
  const all = new Set(files);
  for (const f of files) for (let d = path.posix.dirname(f); d !== '.'; d = path.posix.dirname(d)) all.add(d);
  const names = new Set(files.map((f) => path.posix.basename(f)));
  return { has: (p) => all.has(p), hasName: (n) => names.has(n) };
}

/**
 * Every reference of a doc to a file of the repository: a repo-rooted path (`src/…`, `test/…`,
 * in code spans or prose), a relative Markdown link, and a bare `name.ts` / `name.md` in a code
 * span (some file of that name must exist). Globs and placeholders (`*`, `{a,b}`, `<id>`) and
 * URLs are not checked. Line suffixes (`:12`) and anchors (`#x`) are dropped.
 */
function brokenReferences(doc: string, text: string, repo: ReturnType<typeof repository>): string[] {
  const out: string[] = [];
  const clean = (c: string): string => c.replace(/#.*$/, '').replace(/:\d+(-\d+)?$/, '').replace(/[.,:;]+$/, '').replace(/\/$/, '');
  const pattern = (c: string): boolean => /[*<>{}$|]|\.\.\./.test(c);
  for (const m of text.matchAll(new RegExp(`(?<![\\w./@-])(${TOP}/[\\w./*{},<>-]*[\\w/*}>])`, 'g'))) {
    const p = clean(m[1]!);
    if (!pattern(p) && !EXTERNAL.has(p) && !repo.has(p)) out.push(`${doc}: ${p}`);
  }
  for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
    if (/^[a-z]+:|^#/.test(m[1]!)) continue;
    const p = path.posix.normalize(path.posix.join(path.posix.dirname(doc), clean(m[1]!)));
    if (!repo.has(p)) out.push(`${doc}: link ${m[1]}`);
  }
  for (const m of text.matchAll(/`([\w.-]+\.(?:ts|md))`/g)) {
    if (!EXTERNAL.has(m[1]!) && !repo.hasName(m[1]!)) out.push(`${doc}: ${m[1]}`);
  }
  return out;
}

describe('the README and docs/ name only files of the repository', () => {
  const repo = repository();
  const docs = ['README.md', ...fs.readdirSync(path.join(root, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];

  it('every path, link and file name in README.md and docs/*.md exists', () => {
    const broken = docs.flatMap((d) => brokenReferences(d, fs.readFileSync(path.join(root, d), 'utf8'), repo));
    expect(broken).toEqual([]);
  });

  it('reports a path, a link and a file name that do not exist (the check can fail)', () => {
    const text = 'See `src/runtime/no-such-file.ts:12`, [the guide](no-such-guide.md) and `gone-module.ts`; `src/runtime/*.ts` and `docs/core.md` are fine.';
    expect(brokenReferences('docs/x.md', text, repo)).toEqual(['docs/x.md: src/runtime/no-such-file.ts', 'docs/x.md: link no-such-guide.md', 'docs/x.md: gone-module.ts']);
  });
});
