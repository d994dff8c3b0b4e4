import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { tarOf, writeOciLayout } from '../../../helpers/images/oci-fixture.js';

const BIN = path.resolve('bin/rollout.js');
let dir: string;
let storeDir: string;

function rollout(...args: string[]): { code: number | null; out: string; err: string } {
  const r = spawnSync(process.execPath, [BIN, 'image', ...args], { encoding: 'utf8', env: { ...process.env, ROLLOUT_IMAGE_STORE: path.join(dir, 'env-store') }, timeout: 60_000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'img-cli-'));
  storeDir = path.join(dir, 'store');
  writeOciLayout(path.join(dir, 'layout'), [tarOf([{ name: 'hello', content: 'hi' }])], { WorkingDir: '/w' });
});
afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('rollout image', () => {
  it('imports, lists, removes and prunes in the --image-store store', () => {
    const imp = rollout('import', path.join(dir, 'layout'), '--name', 'demo:1', '--image-store', storeDir);
    expect(imp.code).toBe(0);
    expect(imp.out).toMatch(/^imported demo:1 sha256:[0-9a-f]{64} \(1 layers/);
    const ls = rollout('ls', '--json', '--image-store', storeDir);
    expect(ls.code).toBe(0);
    const list = JSON.parse(ls.out) as { names: string[]; config: { WorkingDir: string } }[];
    expect(list.map((r) => r.names)).toEqual([['demo:1']]);
    expect(list[0]!.config.WorkingDir).toBe('/w');
    expect(rollout('rm', 'demo:1', '--image-store', storeDir).code).toBe(0);
    const prune = rollout('prune', '--image-store', storeDir);
    expect(prune.code).toBe(0);
    expect(prune.out).toMatch(/pruned 0 images and 1 layers/);
    expect(fs.readdirSync(path.join(storeDir, 'layers'))).toEqual([]);
  });

  it('uses ROLLOUT_IMAGE_STORE when no --image-store is given', () => {
    expect(rollout('import', path.join(dir, 'layout'), '--name', 'env-demo').code).toBe(0);
    expect(fs.readdirSync(path.join(dir, 'env-store', 'refs'))).toEqual(['env-demo']);
  });

  it('a corrupt tarball exits 1 naming it; an unknown name exits 1; bad usage exits 2', () => {
    const junk = path.join(dir, 'junk.tar');
    fs.writeFileSync(junk, 'junk'.repeat(300));
    const bad = rollout('import', junk, '--image-store', storeDir);
    expect(bad.code).toBe(1);
    expect(bad.err).toContain(`image '${junk}'`);
    expect(bad.err).toMatch(/not a readable tar archive|neither/);
    expect(rollout('rm', 'nope', '--image-store', storeDir).code).toBe(1);
    expect(rollout('frobnicate').code).toBe(2);
    expect(rollout('prune', '--max-size', 'lots').code).toBe(2);
  });
});
