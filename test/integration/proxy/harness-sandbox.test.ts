import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OracleBackend } from '../../../src/llm/oracle-backend.js';
import { createRuntime, type EmbeddedRuntime } from '../../../src/runtime/runtime.js';
import { createSandboxProvider } from '../../../src/sandbox/index.js';
import type { SandboxProvider } from '../../../src/sandbox/sandbox.js';
import { TestCodec } from '../../../src/testing/test-codec.js';

/**
 * The `harness` family end to end: a stdlib Python agent in a real sandbox (bwrap where it
 * works; ROLLOUT_REQUIRE_BWRAP makes it mandatory in CI) reaches its rollout's proxy only
 * through OPENAI_BASE_URL, the oracle backend answers, the eval runs in the same sandbox.
 */
const AGENT = readFileSync(join(import.meta.dirname, 'sandbox-agent.py'), 'utf8');
const QUIET_CHECK = readFileSync(join(import.meta.dirname, 'quiet-check.py'), 'utf8');
const codec = new TestCodec();
let root: string;
let provider: SandboxProvider;
let runtime: EmbeddedRuntime;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'harness-sandbox-'));
  provider = createSandboxProvider({ stateDir: root, hosts: 1 });
  runtime = createRuntime({ codec, llm: new OracleBackend({ codec }), sandboxes: watched(provider), retries: { max: 0 }, budgetMs: 60_000 });
});
afterAll(async () => {
  await runtime?.close();
  await provider?.close();
  await rm(root, { recursive: true, force: true });
});

/** Host pids whose command line contains `tag` (the sandbox's processes are host processes too). */
async function hostProcesses(tag: string): Promise<number[]> {
  const out: number[] = [];
  for (const p of await readdir('/proc')) {
    if (!/^\d+$/.test(p) || Number(p) === process.pid) continue;
    const cmd = await readFile(`/proc/${p}/cmdline`, 'utf8').catch(() => '');
    if (cmd.includes(tag) && cmd.includes('agent.py')) out.push(Number(p));
  }
  return out;
}

/** The proxy socket dirs the handler handed to the sandbox provider (seen by {@link watched}). */
const socketDirs: string[] = [];

/** `provider`, noting each sandbox's proxy socket dir. */
function watched(p: SandboxProvider): SandboxProvider {
  return {
    create: (spec, o) => {
      if (spec.llmProxy) socketDirs.push(dirname(spec.llmProxy.socketPath));
      return p.create(spec, o);
    },
    close: () => p.close(),
  };
}

/** The socket dirs made since `from` that are still on disk, once none is (the close runs as the attempt ends), or those left after 10 s. */
async function leftDirs(from: number): Promise<string[]> {
  const left = (): string[] => socketDirs.slice(from).filter((d) => existsSync(d));
  await expect.poll(left, { timeout: 10_000 }).toEqual([]);
  return left();
}

// Generous: python3 and bwrap start-up on a machine shared by many test runs.
describe('a harness in a real sandbox', { timeout: 90_000 }, () => {
  it('runs the agent against its proxy, answers it from the oracle and grades the sandbox', async () => {
    const from = socketDirs.length;
    const r = await runtime.submit({
      data_source: 'harness',
      instance_id: 'e2e',
      command: 'python3 agent.py tools',
      files: { 'agent.py': AGENT },
      eval_command: 'test "$(cat done.txt)" = ok',
      oracle: [{ tool_calls: [{ name: 'bash', arguments: { command: 'echo ok > done.txt && cat done.txt' } }] }, { content: 'Finished.' }],
    }).result;
    expect([r.outcome, r.finish, r.reward, r.evalDetails?.harness_exit_code], JSON.stringify(r.evalDetails)).toEqual(['completed', 'no_tool_call', 1, 0]);
    const out = String(r.evalDetails?.harness_output);
    expect(out).toMatch(/base http:\/\/127\.0\.0\.1:\d+\/v1/);
    // Another rollout's token is refused; the sandbox's own is served.
    expect(out).toMatch(/wrong-key 401 invalid_api_key/);
    expect(out).toMatch(/models 200 rollout-policy/);
    expect(r.trajectory.turns).toHaveLength(2);
    expect(r.trajectory.diagnostics.continuity).toBe('token-exact');
    expect(r.trajectory.messages.find((m) => m.role === 'tool')?.content).toBe('ok\n');
    expect(socketDirs.length).toBe(from + 1);
    expect(await leftDirs(from)).toEqual([]);
  });

  it('times out a harness that never calls the model, and leaves no proxy behind', async () => {
    const rt = createRuntime({ codec, llm: new OracleBackend({ codec }), sandboxes: watched(provider), retries: { max: 0 }, budgetMs: 3_000 });
    try {
      const from = socketDirs.length;
      const r = await rt.submit({ data_source: 'harness', instance_id: 'silent', command: 'python3 agent.py silent', files: { 'agent.py': AGENT }, eval_command: 'true' }).result;
      expect([r.outcome, r.finish]).toEqual(['timed-out', 'timeout']);
      expect(socketDirs.length).toBe(from + 1);
      expect(await leftDirs(from)).toEqual([]);
    } finally {
      await rt.close();
    }
  });

  it('stops a harness that hangs after its budget 429, then evaluates in the same sandbox', async () => {
    const tag = `stubborn-${process.pid}-${Date.now()}`;
    const r = await runtime.submit({
      data_source: 'harness',
      instance_id: 'stubborn',
      command: `python3 agent.py stubborn ${tag}`,
      files: { 'agent.py': AGENT },
      max_llm_calls: 2,
      eval_command: 'test "$(cat n.txt)" = 2',
      oracle: [1, 2, 3, 4].map((i) => ({ tool_calls: [{ name: 'bash', arguments: { command: `echo ${i} > n.txt` } }] })),
    }).result;
    expect([r.outcome, r.finish, r.trajectory.turns.length], JSON.stringify(r.evalDetails)).toEqual(['truncated', 'max_iterations', 2]);
    // The eval ran in the shell the harness held: it was interrupted first.
    expect([r.evalDetails?.exit_code, r.reward], JSON.stringify(r.evalDetails)).toEqual([0, 1]);
    // It did not exit by itself: it was stopped (its last line may be lost with the interrupted wait).
    expect(r.evalDetails?.harness_exit_code).toBeNull();
    expect(String(r.evalDetails?.harness_output)).not.toMatch(/\[The command has not finished/);
    expect(await hostProcesses(tag)).toEqual([]);
  });

  it('cancels a working harness: its processes are gone', async () => {
    const tag = `cancel-${process.pid}-${Date.now()}`;
    const h = runtime.submit({ data_source: 'harness', instance_id: 'cancel', command: `python3 agent.py silent ${tag}`, files: { 'agent.py': AGENT }, eval_command: 'true' });
    await expect.poll(() => runtime.get(h.id)?.state, { timeout: 60_000, interval: 20 }).toBe('llmCalling');
    // The harness's process is up (however long its start takes on a loaded machine) before the cancel.
    await expect.poll(async () => (await hostProcesses(tag)).length, { timeout: 60_000, interval: 20 }).toBeGreaterThan(0);
    await h.cancel('test');
    expect((await h.result).outcome).toBe('cancelled');
    expect(await hostProcesses(tag)).toEqual([]);
  });

  it('kills a harness that ignores SIGINT and SIGQUIT, and its pid-hopping daemon, before the eval runs', async () => {
    const tag = `hostile-${process.pid}-${Date.now()}`;
    const r = await runtime.submit({
      data_source: 'harness',
      instance_id: 'hostile',
      command: `python3 agent.py hostile ${tag}`,
      files: { 'agent.py': AGENT, 'check.py': QUIET_CHECK },
      max_llm_calls: 1,
      // Run in the sandbox after the loop ended: log.txt must not grow, no tagged process may live.
      eval_command: `python3 check.py ${tag}`,
      oracle: [1, 2].map((i) => ({ tool_calls: [{ name: 'bash', arguments: { command: `echo ${i}` } }] })),
    }).result;
    expect([r.outcome, r.finish], JSON.stringify(r.evalDetails)).toEqual(['truncated', 'max_iterations']);
    expect(String(r.evalDetails?.harness_output)).toMatch(/refused 429 max_llm_calls/);
    expect(String(r.evalDetails?.output)).toMatch(/^sizes (\d+) \1 alive 0$/m);
    expect([r.evalDetails?.exit_code, r.reward]).toEqual([0, 1]);
    // It ignored the SIGINT: it was killed, it did not exit.
    expect(r.evalDetails?.harness_exit_code).toBeNull();
    expect(await hostProcesses(tag)).toEqual([]);
  });

  it('kills the daemon a harness left behind when it exited by itself, before the eval runs', async () => {
    const tag = `daemon-${process.pid}-${Date.now()}`;
    const r = await runtime.submit({
      data_source: 'harness',
      instance_id: 'daemon',
      command: `python3 agent.py daemon ${tag}`,
      files: { 'agent.py': AGENT, 'check.py': QUIET_CHECK },
      eval_command: `python3 check.py ${tag}`,
    }).result;
    expect([r.outcome, r.finish, r.evalDetails?.harness_exit_code], JSON.stringify(r.evalDetails)).toEqual(['completed', 'no_tool_call', 0]);
    expect(String(r.evalDetails?.output)).toMatch(/^sizes (\d+) \1 alive 0$/m);
    expect(r.reward).toBe(1);
    expect(await hostProcesses(tag)).toEqual([]);
  });

  it('keeps the harness output as it printed it, without the shell\'s notes to a model', async () => {
    // Printed across two polls of the shell (one per second): a note between them would split the line.
    const r = await runtime.submit({ data_source: 'harness', instance_id: 'partial', command: 'python3 agent.py partial', files: { 'agent.py': AGENT }, eval_command: 'true' }).result;
    expect([r.outcome, r.evalDetails?.harness_exit_code]).toEqual(['completed', 0]);
    expect(r.evalDetails?.harness_output).toBe('partial-rest\nlast\n');
  });
});
