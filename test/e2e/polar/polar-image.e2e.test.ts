import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HARNESS_PRESETS } from '../../../src/handlers/tasks/harness-presets/index.js';
import { presetProcesses, store as harnessStore, testTag } from '../harness/preset-kit.js';
import { ROOT } from '../service/harness.js';
import { DERIVED_MARKER, imageTestsMissing, pythonImageLayout, rolloutImageImport, WITH_PYTHON_IMAGE, writeDerivedDockerArchive } from './polar-image-kit.js';
import { expectPolarShape } from './polar-shape.js';
import { polarServer } from './polar-server.js';

// Polar's runtime.image on a real `rollout serve` with real bwrap sandboxes: a trainer names
// Docker images; the operator imported them with `rollout image import` (an OCI layout under a
// name of its own, and a docker archive recorded by its repo tag) and maps a Docker name onto
// the store's with --image-alias. The shell harness (examples/harness/simple_agent.py, the
// oracle replaying its turns) and Polar's codex preset run inside those images, and prove it:
// the Python test image has the sample repository at /testbed (its WorkingDir) and the derived
// image a marker file, neither of which the host has. A task naming an image the store lacks is
// refused at submit; `--polar-image ignore` runs it on the host's root instead.
const skip = imageTestsMissing() ?? (WITH_PYTHON_IMAGE ? null : 'set ROLLOUT_TEST_PYTHON_IMAGE=1 to build and import the Python test image');
const PRESET = 'codex';
const VERSION = HARNESS_PRESETS[PRESET].defaultVersion;
const CODEX_IMAGE = 'ghcr.io/polar-e2e/python-node:1';

const example = JSON.parse(readFileSync(join(ROOT, 'examples/harness/tasks.jsonl'), 'utf8').split('\n')[0]!) as { files: Record<string, string> };
const agentB64 = Buffer.from(example.files['agent/simple_agent.py']!).toString('base64');
// The agent is written under /tmp, so the workspace holds only what the tool call makes.
const shellCommand = `mkdir -p /tmp/agent && printf '%s' '${agentB64}' | base64 -d > /tmp/agent/simple_agent.py && printf '%s\\n' {{INSTRUCTION}} > /tmp/agent/TASK.md && python3 /tmp/agent/simple_agent.py /tmp/agent/TASK.md`;
/** What the agent's one tool call shows of its root: the image's /testbed, the derived image's marker, its working dir. */
const LOOK = "ls /testbed/minilib; cat /etc/polar-e2e-image; echo PWD=$PWD; echo 'hello world' > hello.txt";
const shellOracle = [{ tool_calls: [{ name: 'bash', arguments: { command: LOOK } }] }, { content: 'done' }];

let work: string;
let storeDir: string;
const polar = polarServer();
const api = polar.api;

beforeAll(() => {
  if (skip) return;
  work = mkdtempSync(join(tmpdir(), 'polar-image-e2e-'));
  // The sandboxes' unprivileged uid must pass through it to the state dir inside.
  chmodSync(work, 0o755);
  storeDir = join(work, 'store');
  // Harbor's verifier for the shell task: reward 1 only for hello.txt made in the image's /testbed.
  mkdirSync(join(work, 'shell-tests'));
  writeFileSync(join(work, 'shell-tests', 'test.sh'), 'mkdir -p logs/verifier\nif grep -qx "hello world" hello.txt && [ "$PWD" = /testbed ] && [ -f /testbed/minilib/intervals.py ]; then echo 1; else echo 0; fi > logs/verifier/reward.txt\n');
  mkdirSync(join(work, 'codex-tests'));
  writeFileSync(join(work, 'codex-tests', 'test.sh'), `mkdir -p logs/verifier\nif [ "$(python3 proj/answer.py)" = 42 ] && [ "$(cat proj/out.txt)" = "${DERIVED_MARKER}" ]; then echo 1; else echo 0; fi > logs/verifier/reward.txt\n`);
  const layout = pythonImageLayout();
  // An OCI layout carries no repository name: imported under the operator's own.
  rolloutImageImport(layout, storeDir, 'py-test');
  // A docker archive is recorded by its repo tags: no --name.
  const out = rolloutImageImport(writeDerivedDockerArchive(layout, join(work, 'derived'), CODEX_IMAGE), storeDir);
  expect(out).toContain(`imported ${CODEX_IMAGE} `);
}, 900_000);
afterAll(() => {
  if (!work) return;
  // No sandbox's overlay is left mounted from the store.
  expect(readFileSync('/proc/self/mountinfo', 'utf8')).not.toContain(work);
  rmSync(work, { recursive: true, force: true });
});


async function done(id: string): Promise<any> {
  let last: any;
  await expect.poll(async () => ['completed', 'failed', 'cancelled'].includes((last = (await api('GET', `/rollout/task/${id}`)).body).status), { timeout: 300_000, interval: 250 }).toBe(true);
  expectPolarShape(last);
  return last;
}

function shellTask(id: string, image: string, n = 1): Record<string, unknown> {
  return {
    task_id: id,
    instruction: 'Create hello.txt containing exactly: hello world',
    num_samples: n,
    runtime: { image },
    agent: { harness: 'shell', custom_shell: { command: shellCommand }, settings: { oracle: shellOracle } },
    builder: { strategy: 'per_request' },
    evaluator: { strategy: 'harbor', config: { tests_dir: join(work, 'shell-tests'), tests_target: 'tests', verifier_dir: 'logs/verifier', test_command: 'bash tests/test.sh' } },
  };
}

/** The output of the agent's one tool call, as the second LLM call's prompt carries it. */
function toolOutput(session: any): string {
  return session.trajectory.traces[1].prompt_messages.find((m: any) => m.role === 'tool').content as string;
}

const exec = (cmd: string): { name: string; arguments: Record<string, unknown> } => ({ name: 'exec_command', arguments: { cmd } });
const CODEX_ORACLE = [
  { tool_calls: [exec("printf 'print(6 * 7)\\n' > answer.py")] },
  { tool_calls: [exec('cat /etc/polar-e2e-image > out.txt && cat out.txt')] },
  { content: 'Done.' },
];

describe.skipIf(skip !== null)(`Polar's runtime.image on rollout serve${skip ? ` (skipped: ${skip})` : ''}`, () => {
  it('runs the shell harness and the codex preset in the imported images, aliased from Docker names, and refuses a missing image at submit', async () => {
    await polar.start(['--backend', 'oracle', '--sandbox', 'bwrap', '--path-root', work, '--image-store', storeDir, '--image-alias', 'python:3.11=py-test']);

    // An image the store lacks: 422 naming runtime.image and the import command, nothing started.
    const missing = await api('POST', '/rollout/task/submit', shellTask('t-missing', 'ghcr.io/nobody/absent:2'));
    expect(missing.status).toBe(422);
    expect(missing.body.detail).toEqual([{ loc: ['body', 'runtime', 'image'], msg: expect.stringContaining('import it with `rollout image import PATH --name ghcr.io/nobody/absent:2`'), type: 'value_error' }]);
    expect((await api('GET', '/rollout/task/t-missing')).status).toBe(404);
    expect((await api('GET', '/tasks')).body.tasks).toEqual([]);

    // The shell harness, its image named as Docker Hub's python:3.11 and mapped by the alias.
    expect((await api('POST', '/rollout/task/submit', shellTask('t-shell', 'docker.io/library/python:3.11', 2))).status).toBe(200);

    // Polar's codex preset, in the docker archive's image named by its repo tag.
    const withCodex = harnessStore.installed(PRESET, VERSION);
    if (!withCodex && process.env['ROLLOUT_REQUIRE_TOOLS'] === '1') throw new Error(`ROLLOUT_REQUIRE_TOOLS set but ${PRESET}@${VERSION} is not in ${harnessStore.dir} (node bin/rollout.js harness install ${PRESET})`);
    const { tag, env } = testTag('polar-image-codex');
    if (withCodex) {
      const codex = await api('POST', '/rollout/task/submit', {
        task_id: 't-codex',
        instruction: 'Write answer.py that prints 6*7, then copy /etc/polar-e2e-image into out.txt.',
        num_samples: 1,
        runtime: { image: CODEX_IMAGE, workdir: 'proj', prepare: [{ type: 'exec', command: 'mkdir -p proj' }] },
        agent: { harness: PRESET, model_name: 'policy', env, settings: { oracle: CODEX_ORACLE } },
        builder: { strategy: 'prefix_merging' },
        evaluator: { strategy: 'harbor', config: { tests_dir: join(work, 'codex-tests'), tests_target: 'tests', verifier_dir: 'logs/verifier', test_command: 'bash tests/test.sh' } },
      });
      expect(codex.status).toBe(200);
    } else process.stderr.write(`skipping the codex part: needs ${PRESET}@${VERSION} in ${harnessStore.dir} (node bin/rollout.js harness install ${PRESET})\n`);

    const shell = await done('t-shell');
    expect(shell.status).toBe('completed');
    for (const s of shell.results) {
      const why = JSON.stringify({ status: s.status, error: s.error, metadata: s.metadata });
      expect([s.status, s.error], why).toEqual(['COMPLETED', null]);
      expect(s.metadata).toMatchObject({ image: 'py-test', runtime_image: 'docker.io/library/python:3.11' });
      // The image's own files and working dir, which the host has not; not the derived image's marker.
      const out = toolOutput(s);
      expect(out).toContain('intervals.py');
      expect(out).toContain('PWD=/testbed');
      expect(out).toContain('/etc/polar-e2e-image: No such file or directory');
      for (const t of s.trajectory.traces) expect(t.reward).toBe(1);
    }

    if (withCodex) {
      const st = await done('t-codex');
      const s = st.results[0];
      const rec = (await api('GET', `/v1/rollouts/${s.metadata.rollout_id}`)).body.result;
      const why = JSON.stringify({ status: s.status, error: s.error, details: rec.evalDetails });
      expect([st.status, s.status], why).toEqual(['completed', 'COMPLETED']);
      expect(s.metadata).toMatchObject({ image: CODEX_IMAGE, runtime_image: CODEX_IMAGE });
      expect(rec.evalDetails.preset).toBe(`${PRESET}@${VERSION}`);
      expect(rec.evalDetails.harness_exit_code, why).toBe(0);
      // The verifier read the derived image's marker through the CLI's tool call: reward 1.
      for (const t of s.trajectory.traces) expect(t.reward, why).toBe(1);
      expect(JSON.stringify(s.trajectory.traces.map((t: any) => t.response_messages))).toContain(DERIVED_MARKER);
      await expect.poll(() => presetProcesses(tag), { timeout: 30_000 }).toEqual([]);
    }
  }, 900_000);

  it('runs a task on the default root under --polar-image ignore, whatever image it names', async () => {
    await polar.start(['--backend', 'oracle', '--sandbox', 'bwrap', '--path-root', work, '--image-store', storeDir, '--polar-image', 'ignore']);
    expect((await api('POST', '/rollout/task/submit', shellTask('t-ignored', 'ghcr.io/nobody/absent:2'))).status).toBe(200);
    const st = await done('t-ignored');
    const s = st.results[0];
    expect(s.status, JSON.stringify(s.error)).toBe('COMPLETED');
    expect(s.metadata).toMatchObject({ image: null, runtime_image: 'ghcr.io/nobody/absent:2' });
    // The host's root: no /testbed, and the verifier that wants it gives 0.
    expect(toolOutput(s)).toContain("cannot access '/testbed/minilib'");
    expect(toolOutput(s)).not.toContain('PWD=/testbed');
    expect(s.trajectory.traces[0].reward).toBe(0);
  }, 300_000);
});
