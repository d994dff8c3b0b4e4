import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { createQwen3Codec } from '../../../../src/llm/qwen3-codec.js';
import { createRuntime, type EmbeddedRuntime } from '../../../../src/runtime/runtime.js';
import { createSandboxProvider } from '../../../../src/sandbox/index.js';
import { ImageStore } from '../../../../src/sandbox/images/image-store.js';
import type { SandboxProvider } from '../../../../src/sandbox/sandbox.js';
import { ScriptedPolicy } from '../../../../src/testing/scripted-policy.js';
import { busyboxBashLayer, tarOf, writeOciLayout } from '../../../helpers/images/oci-fixture.js';
import { missingTools } from '../../../helpers/system-tools.js';

const why = process.getuid?.() !== 0 ? 'needs root (kernel overlayfs)' : missingTools('bwrap', 'busybox');
/**
 * The Python + git + pytest image (scripts/build-test-images.sh python: mmdebstrap, ~1 min the
 * first time, cached after) is built only when ROLLOUT_TEST_PYTHON_IMAGE=1; .ci/run sets it, and
 * then the SWE test is required (a missing prerequisite fails the file instead of skipping it).
 */
const withPython = process.env.ROLLOUT_TEST_PYTHON_IMAGE === '1';
if (withPython && why) throw new Error(`ROLLOUT_TEST_PYTHON_IMAGE=1 but the SWE image test cannot run: ${why}`);

let root: string;
let store: ImageStore;
let provider: SandboxProvider;
let runtime: EmbeddedRuntime;

describe.skipIf(why !== null)(`task instances with images${why ? ` (skipped: ${why})` : ''}`, () => {
  beforeAll(async () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'task-img-'));
    // Sandboxed processes run as an unprivileged uid: the state dir's parents must be searchable.
    fs.chmodSync(root, 0o711);
    store = new ImageStore(path.join(root, 'store'));
    const base = busyboxBashLayer(root);
    if (!base) throw new Error('busybox is missing: apt-get install busybox-static');
    writeOciLayout(path.join(root, 'layout'), [base, tarOf([{ name: 'etc/', type: '5' }, { name: 'etc/image-release', content: 'fixture 1\n' }])], { Env: ['PATH=/bin'], WorkingDir: '/work' });
    await store.import(path.join(root, 'layout'), { name: 'fixture' });
    if (withPython) {
      const layout = execFileSync(path.resolve('scripts/build-test-images.sh'), ['python'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], timeout: 600_000 }).trim().split('\n').pop()!;
      for (const id of ['minilib__minilib-1', 'minilib__minilib-2']) await store.import(layout, { name: `sweb.eval.x86_64.${id.replace('__', '_1776_')}` });
    }
    provider = createSandboxProvider({ stateDir: path.join(root, 'state'), hosts: 2, imageStore: store.dir });
    const codec = createQwen3Codec();
    runtime = createRuntime({ codec, llm: new ScriptedPolicy({ codec }), sandboxes: provider, stages: { init: 4, run: 4, eval: 4 }, retries: { max: 0 } });
  }, 900_000);

  afterAll(async () => {
    await runtime?.close();
    await provider?.close();
    expect(fs.readFileSync('/proc/self/mountinfo', 'utf8')).not.toContain(root);
    fs.rmSync(root, { recursive: true, force: true });
  }, 120_000);

  it('a shell task with an image runs its act and eval in that image', async () => {
    const r = await runtime.submit({
      data_source: 'shell',
      instance_id: 'shell-in-image',
      image: 'fixture',
      prompt: 'Copy /etc/image-release to out.txt.',
      eval_command: 'grep -qx "fixture 1" out.txt && [ "$PWD" = /work ]',
      oracle: [{ tool_calls: [{ name: 'execute_bash', arguments: { command: 'cp /etc/image-release out.txt' } }] }, { tool_calls: [{ name: 'finish', arguments: {} }] }],
    }).result;
    expect(r.outcome).toBe('completed');
    expect(r.reward).toBe(1);
  }, 120_000);

  it('an instance naming a missing image ends as a task-error naming it', async () => {
    const r = await runtime.submit({ data_source: 'shell', instance_id: 'shell-missing-image', image: 'ghcr.io/nobody/missing:1', prompt: 'x', eval_command: 'true' }).result;
    expect(r.outcome).toBe('task-error');
    expect(r.error?.message).toContain("image 'ghcr.io/nobody/missing:1'");
    expect(r.error?.code).toBe('IMAGE_NOT_FOUND');
  }, 60_000);

  it('a SWE-bench row whose derived image is missing and that carries no repository is a task-error naming the image', async () => {
    const r = await runtime.submit({
      data_source: 'swebench',
      instance_id: 'acme__widget-7',
      repo: 'acme/widget',
      base_commit: 'abcdef1',
      problem_statement: 'x',
      FAIL_TO_PASS: '["t::a"]',
      PASS_TO_PASS: '[]',
      test_patch: '',
    }).result;
    expect(r.outcome).toBe('task-error');
    expect(r.error?.message).toContain('sweb.eval.x86_64.acme_1776_widget-7');
  }, 60_000);

  it.skipIf(!withPython)('the sample SWE tasks resolve in their image, graded per test; a wrong fix is not resolved', async () => {
    const rows = fs.readFileSync(path.resolve('examples/swe-sample/tasks.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>);
    const wrong = { ...rows[0]!, instance_id: 'minilib__minilib-1', trajectory_id: 'wrong', oracle: [{ tool_calls: [{ name: 'str_replace_editor', arguments: { command: 'str_replace', path: '/testbed/minilib/intervals.py', old_str: 'out = []', new_str: 'out = []\n    return sorted(intervals)' } }] }, { tool_calls: [{ name: 'finish', arguments: {} }] }] };
    const results = await Promise.all([...rows, wrong].map((row) => runtime.submit(row as never).result));
    for (const r of results.slice(0, 2)) {
      expect(r.outcome).toBe('completed');
      expect(r.resolved).toBe(true);
      const report = (r.evalDetails as { report: { FAIL_TO_PASS: { failure: string[] }; tests: Record<string, string> } }).report;
      expect(report.FAIL_TO_PASS.failure).toEqual([]);
      expect(Object.values(report.tests).every((s) => s === 'PASSED')).toBe(true);
      expect((r.evalDetails as { image: string }).image).toMatch(/^sweb\.eval\.x86_64\.minilib_1776_minilib-\d$/);
    }
    const bad = results[2]!;
    expect(bad.resolved).toBe(false);
    const report = (bad.evalDetails as { report: { FAIL_TO_PASS: { failure: string[] }; PASS_TO_PASS: { failure: string[] } } }).report;
    expect(report.PASS_TO_PASS.failure.length).toBeGreaterThan(0);
  }, 300_000);
  it.skipIf(!withPython)('a harness task with an image runs its agent and its eval in that image', async () => {
    const row = JSON.parse(fs.readFileSync(path.resolve('examples/harness/tasks.jsonl'), 'utf8').split('\n')[0]!) as Record<string, unknown>;
    expect(row.instance_id).toBe('harness-hello');
    const image = 'sweb.eval.x86_64.minilib_1776_minilib-1';
    // The image's WorkingDir is /testbed, a checkout of the sample repository: the host's root has neither.
    const r = await runtime.submit({ ...row, instance_id: 'harness-in-image', image, eval_command: `${row.eval_command as string} && [ "$PWD" = /testbed ] && test -f minilib/intervals.py` } as never).result;
    expect(r.error).toBeNull();
    expect(r.outcome).toBe('completed');
    expect(r.reward).toBe(1);
  }, 300_000);
});
