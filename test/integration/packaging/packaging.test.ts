import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const root = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');

/** The README's embedded example, exactly as printed (the one ```ts runnable block of README.md). */
function readmeExample(): string {
  const lines = readFileSync(join(root, 'README.md'), 'utf8').split('\n');
  const start = lines.findIndex((l) => /^```ts\s+runnable\s*$/.test(l));
  const end = lines.findIndex((l, j) => j > start && l.startsWith('```'));
  expect(start).toBeGreaterThan(-1);
  return lines.slice(start + 1, end).join('\n');
}

// A plain-Node consumer of the packed package: `npm pack` (its prepack builds dist/ with tsc),
// the tarball unpacked as node_modules/rollout-runtime of a fresh project, and the package's
// runtime dependencies (and only those: no tsx, no node-llama-cpp, no dev tools) linked from this
// clone's node_modules (the test runs offline; `npm install ./rollout-runtime-x.tgz` would fetch
// the same packages from the registry). Node resolves a linked package's own dependencies from
// its real place in the clone.
describe('the packed package under plain Node', { timeout: 600_000 }, () => {
  let dir: string;
  let consumer: string;
  let files: string[];
  const hadDist = existsSync(join(root, 'dist'));

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'rr-pack-'));
    const { stdout } = await run('npm', ['pack', '--pack-destination', dir, '--json'], { cwd: root, maxBuffer: 64 * 1024 * 1024 });
    const packed = JSON.parse(stdout) as { filename: string; files: { path: string }[] }[];
    files = packed[0]!.files.map((f) => f.path);
    consumer = join(dir, 'consumer');
    const modules = join(consumer, 'node_modules');
    mkdirSync(modules, { recursive: true });
    writeFileSync(join(consumer, 'package.json'), '{ "name": "consumer", "private": true, "type": "module" }\n');
    await run('tar', ['-xzf', join(dir, packed[0]!.filename), '-C', modules]);
    renameSync(join(modules, 'package'), join(modules, 'rollout-runtime'));
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
    // @types/node: the consumer's own, for the TypeScript consumer below.
    for (const name of [...Object.keys(pkg.dependencies), '@types/node']) {
      mkdirSync(dirname(join(modules, name)), { recursive: true });
      symlinkSync(join(root, 'node_modules', name), join(modules, name));
    }
  }, 600_000);

  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
    // The build is an artifact of this test unless someone had built before.
    if (!hadDist) rmSync(join(root, 'dist'), { recursive: true, force: true });
  });

  it('ships the build, the command and the page, but no TypeScript sources', () => {
    expect(files).toEqual(expect.arrayContaining(['dist/src/index.js', 'dist/src/index.d.ts', 'dist/machines/rollout.machine.js', 'bin/rollout.js', 'visualizer/index.html', 'package.json']));
    expect(files.filter((f) => f.startsWith('src/') || f.startsWith('test/'))).toEqual([]);
  });

  it("imports 'rollout-runtime' and runs a rollout through the real API", async () => {
    const script = `import('rollout-runtime').then(async ({ createRuntime }) => {
      const rt = createRuntime({ backends: ['oracle'] });
      const h = rt.submit({ data_source: 'math', instance_id: 'q', problem: '1+1?', answer: '2',
        oracle: [{ content: 'ok', tool_calls: [{ name: 'finish', arguments: { message: '\\\\boxed{2}' } }] }] }, { max_iterations: 4 });
      const r = await h.result;
      await rt.close();
      console.log(JSON.stringify({ outcome: r.outcome, reward: r.reward, tokens: r.trajectory.tokens.length }));
    })`;
    const { stdout } = await run(process.execPath, ['-e', script], { cwd: consumer, timeout: 180_000 });
    const out = JSON.parse(stdout.trim().split('\n').pop()!) as { outcome: string; reward: number; tokens: number };
    expect(out).toMatchObject({ outcome: 'completed', reward: 1 });
    expect(out.tokens).toBeGreaterThan(0);
  });

  it('runs the README embedded example exactly as printed, to exit 0', async () => {
    writeFileSync(join(consumer, 'readme-example.mjs'), `${readmeExample()}\n`);
    // execFile rejects on a non-zero exit or a hang past the timeout.
    await run(process.execPath, ['readme-example.mjs'], { cwd: consumer, timeout: 180_000 });
  });

  it('runs the rollout command without tsx or sources', async () => {
    const { stdout } = await run(process.execPath, [join(consumer, 'node_modules/rollout-runtime/bin/rollout.js'), '--version'], { cwd: consumer });
    expect(stdout.trim()).toBe(`rollout-runtime ${JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version}`);
  });

  it('says how to install node-llama-cpp when llm-serve needs it and it is not there (an optional peer)', async () => {
    const r = await run(process.execPath, [join(consumer, 'node_modules/rollout-runtime/bin/rollout.js'), 'llm-serve', '--tiny', '--port', '0'], { cwd: consumer }).then(
      () => ({ code: 0, stderr: '' }),
      (e: { code: number; stderr: string }) => e,
    );
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/node-llama-cpp is not installed.*npm install --save-exact node-llama-cpp@3\.21\.1/s);
  });

  it('gives TypeScript consumers the types through the exports', async () => {
    writeFileSync(
      join(consumer, 'check.ts'),
      `import { createRuntime, type RolloutResult } from 'rollout-runtime';\n` +
        `const rt = createRuntime({ backends: ['oracle'] });\nconst r: Promise<RolloutResult> = rt.submit({ data_source: 'math' }).result;\n` +
        `// @ts-expect-error: the API is typed, not any\nconst n: number = rt.submit({}).id;\nexport { r, n };\n`,
    );
    const tsc = join(root, 'node_modules/typescript/bin/tsc');
    await run(process.execPath, [tsc, '--noEmit', '--strict', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--skipLibCheck', '--types', 'node', 'check.ts'], { cwd: consumer, timeout: 180_000 });
  });
});

// A fresh clone, as the README's first lines leave it (`npm ci`: node_modules, no dist/ — the
// install builds nothing): the README's example copied into a file and run with `npx tsx` (#28).
// The clone is this working tree's files git knows (tracked and new, not ignored: no dist/),
// with this checkout's node_modules linked in (offline; `npm ci` installs the same packages).
describe('the README example in a fresh clone', { timeout: 600_000 }, () => {
  let clone: string;

  beforeAll(async () => {
    clone = mkdtempSync(join(tmpdir(), 'rr-clone-'));
    const { stdout } = await run('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: root, maxBuffer: 64 * 1024 * 1024 });
    for (const f of stdout.split('\0')) {
      if (!f || !existsSync(join(root, f))) continue;
      mkdirSync(dirname(join(clone, f)), { recursive: true });
      cpSync(join(root, f), join(clone, f));
    }
    symlinkSync(join(root, 'node_modules'), join(clone, 'node_modules'));
  }, 600_000);

  afterAll(() => {
    if (clone) rmSync(clone, { recursive: true, force: true });
  });

  it('has no build to resolve the package name to', () => {
    expect(existsSync(join(clone, 'dist'))).toBe(false);
    expect(existsSync(join(clone, 'src/index.ts'))).toBe(true);
  });

  it.each(['.', 'examples'])('runs it exactly as printed with npx tsx, from the clone (%s), to exit 0', async (sub) => {
    const cwd = join(clone, sub);
    writeFileSync(join(cwd, 'readme-example.ts'), `${readmeExample()}\n`);
    // What `npx tsx readme-example.ts` runs; execFile rejects on a non-zero exit or a hang.
    await run(process.execPath, [join(clone, 'node_modules/tsx/dist/cli.mjs'), 'readme-example.ts'], { cwd, timeout: 300_000 });
  });
});
