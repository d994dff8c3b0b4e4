/**
 * Run as an unprivileged uid by image-unprivileged.test.ts (`setpriv --reuid=65534 ...`):
 * imports a fixture image (with a whiteout and an opaque dir) into a store in `argv[2]`, starts
 * an image sandbox with the driver `argv[3]` and prints one JSON line of what it saw. With an
 * OCI layout in `argv[4]` (the Python test image), imports that instead and runs its shell,
 * python3, pytest, git and the Python REPL.
 */
import fs from 'node:fs';
import path from 'node:path';
import { createSandboxProvider } from '../../../src/sandbox/index.js';
import { ImageStore } from '../../../src/sandbox/images/image-store.js';
import { busyboxBashLayer, tarOf, writeOciLayout } from './oci-fixture.js';

/** The Python test image's sandbox as this uid: what its shell and REPL report. */
async function pythonImage(dir: string, driver: 'bwrap' | 'unshare', layout: string): Promise<Record<string, unknown>> {
  const store = new ImageStore(path.join(dir, 'store'));
  await store.import(layout, { name: 'py' });
  const provider = createSandboxProvider({ driver, hosts: 1, stateDir: path.join(dir, 'state'), imageStore: store.dir, timeouts: { bashMs: 20_000, noOutputMs: 20_000 } });
  const out: Record<string, unknown> = {};
  try {
    const sb = await provider.create({ image: 'py' }, { rolloutId: 'r-unpriv-py' });
    try {
      out.bash = (await sb.bash({ command: 'id -u; pwd; echo hi > /testbed/new.txt && cat /testbed/new.txt; python3 -m pytest -q tests 2>&1 | tail -1; git status --short; grep CapEff /proc/self/status; grep " / / " /proc/self/mountinfo' })).output;
      const py = await sb.python('import os\nprint(os.getuid(), open("/testbed/new.txt").read().strip())');
      out.python = py.output;
      out.pythonError = py.error;
    } finally {
      await sb.close();
    }
    out.sandboxesLeft = fs.readdirSync(path.join(dir, 'state', 'sandboxes'));
  } catch (err) {
    out.error = (err as Error).message;
  } finally {
    await provider.close();
  }
  return out;
}

async function main(): Promise<void> {
  const dir = process.argv[2]!;
  const driver = process.argv[3] as 'bwrap' | 'unshare';
  if (process.argv[4]) {
    process.stdout.write(`${JSON.stringify(await pythonImage(dir, driver, process.argv[4]))}\n`);
    return;
  }
  const base = busyboxBashLayer(dir);
  if (!base) throw new Error('busybox is missing');
  const lower = tarOf([{ name: 'app/', type: '5' }, { name: 'app/gone.txt', content: 'hidden\n' }, { name: 'app/old/', type: '5' }, { name: 'app/old/stale.txt', content: 'stale\n' }]);
  const top = tarOf([
    { name: 'app/', type: '5' },
    { name: 'app/.wh.gone.txt' },
    { name: 'app/old/', type: '5' },
    { name: 'app/old/.wh..wh..opq' },
    { name: 'app/old/fresh.txt', content: 'fresh\n' },
    { name: 'app/kept.txt', content: 'kept\n' },
  ]);
  writeOciLayout(path.join(dir, 'layout'), [base, lower, top], { Env: ['PATH=/bin'], WorkingDir: '/app', User: '1000' });
  const store = new ImageStore(path.join(dir, 'store'));
  await store.import(path.join(dir, 'layout'), { name: 'fixture' });
  const provider = createSandboxProvider({ driver, hosts: 1, stateDir: path.join(dir, 'state'), imageStore: store.dir, timeouts: { bashMs: 10_000, noOutputMs: 10_000 } });
  const out: Record<string, unknown> = {};
  try {
    const sb = await provider.create({ image: 'fixture', files: { 'seeded.txt': 'seeded\n' } }, { rolloutId: 'r-unpriv' });
    try {
      out.bash = (await sb.bash({ command: 'id -u; pwd; ls /app /app/old; cat kept.txt seeded.txt; echo mine > kept.txt; echo w > /app/new.txt && cat kept.txt new.txt; grep " / / " /proc/self/mountinfo' })).output;
      const ed = await sb.editor({ command: 'str_replace', path: '/app/new.txt', old_str: 'w', new_str: 'edited' });
      out.editorError = ed.error;
      out.read = await sb.readFile('/app/new.txt');
    } finally {
      await sb.close();
    }
    // The layers were never written.
    out.layerKept = fs.readFileSync(path.join(store.resolve('fixture').lowerDirs[0]!, 'app', 'kept.txt'), 'utf8');
    out.sandboxesLeft = fs.readdirSync(path.join(dir, 'state', 'sandboxes'));
  } catch (err) {
    out.error = (err as Error).message;
  } finally {
    await provider.close();
  }
  process.stdout.write(`${JSON.stringify(out)}\n`);
}

void main();
