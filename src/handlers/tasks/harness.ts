import { randomBytes } from 'node:crypto';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { SandboxError, TaskError } from '../../errors.js';
import { LlmProxy } from '../../proxy/llm-proxy.js';
import { SandboxHarness } from '../../proxy/sandbox-harness.js';
import type { SandboxSpec } from '../../sandbox/sandbox.js';
import { withInstanceImage } from '../../sandbox/images/instance-image.js';
import type { AgentHandler } from '../../proxy/agent-contract.js';
import { HarnessStore, HARNESS_PRESETS, PRESET_NAMES, presetCommand } from './harness-presets/index.js';
import { clip, freshShellForEval, parseInstance, runToEnd } from './task-kit.js';
import { gradeSweLog, SweGradeSchema, sweTestsTimedOut, type SweGrade } from './swe-harness-eval.js';

/**
 * The `harness` task: `{data_source: "harness", instance_id, command, files?, setup?,
 * eval_command, eval_timeout_s?, max_llm_calls?, max_tokens_total?, oracle?}`. `files` seed
 * `/workspace` and `setup` runs there, as in the `shell` family; `command` is the agent program,
 * or `preset` + `instruction` name an agent CLI run from the harness store
 * (docs/harness-presets.md; `version`, `args`, `env`, `model` tune it).
 */
export const HarnessInstanceSchema = z.object({
  /** The agent program (a shell command); or name a `preset` instead. */
  command: z.string().min(1).optional(),
  /** An agent CLI run unchanged from the harness store (docs/harness-presets.md); needs `instruction`. */
  preset: z.enum(PRESET_NAMES, { message: `unknown preset: known ones are ${PRESET_NAMES.join(', ')}` }).optional(),
  /** The preset's version in the store (default: its tested one). */
  version: z.string().regex(/^[0-9A-Za-z][0-9A-Za-z.+-]{0,63}$/, { message: 'must be an npm version (letters, digits, . + -)' }).optional(),
  /** Extra arguments appended to the preset's command line. */
  args: z.array(z.string().max(10_000)).max(100).optional(),
  /** Extra environment of the preset's CLI (over what the preset sets). */
  env: z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, { message: 'must be a shell variable name' }), z.string().max(100_000)).optional(),
  /** The task given to the preset's CLI (its prompt). */
  instruction: z.string().min(1).max(1_000_000).optional(),
  /** The model name the preset's CLI asks for (echoed back; default: the preset's). */
  model: z.string().min(1).max(200).regex(/^[\x21-\x7e]+$/, { message: 'must be printable ASCII without spaces' }).optional(),
  files: z.record(z.string().min(1), z.string()).optional(),
  setup: z.array(z.string()).optional(),
  eval_command: z.string().min(1),
  eval_timeout_s: z.number().positive().max(3600).optional(),
  /** Grade the eval's test log per test as the SWE family does (Polar's swebench_harness): resolved iff the command exited 0 and every FAIL_TO_PASS / PASS_TO_PASS test passed. */
  swebench_grade: SweGradeSchema.optional(),
  /** The directory the preset's CLI starts in (relative to the workspace, or absolute). */
  cwd: z.string().min(1).max(4096).optional(),
  /** Chat requests answered at most; the next one is refused (429) and the loop ends `max_iterations`. Default: the runtime's max iterations. */
  max_llm_calls: z.number().int().positive().max(100_000).optional(),
  /** Tokens of the trajectory (every segment, prompt and sampled) at most; past it the loop ends `length`. */
  max_tokens_total: z.number().int().positive().optional(),
  /** The proxy's API key (the agent's `OPENAI_API_KEY`); default a fresh random one. Polar sets its session id here. */
  api_key: z.string().regex(/^[A-Za-z0-9_-]{16,200}$/, 'must be 16 to 200 characters of [A-Za-z0-9_-]').optional(),
}).superRefine((v, ctx) => {
  if ((v.command === undefined) === (v.preset === undefined)) ctx.addIssue({ code: 'custom', path: ['command'], message: 'give exactly one of command and preset' });
  if (v.preset !== undefined && v.instruction === undefined) ctx.addIssue({ code: 'custom', path: ['instruction'], message: 'required with a preset' });
  if (v.preset === undefined) {
    for (const k of ['version', 'args', 'env', 'instruction', 'model', 'cwd'] as const) if (v[k] !== undefined) ctx.addIssue({ code: 'custom', path: [k], message: 'only with a preset' });
  }
  // Also when another field failed: an error names every problem at once.
}, { when: (p) => typeof p.value === 'object' && p.value !== null });

interface HarnessState {
  evalCommand: string;
  evalTimeoutMs: number;
  agent: SandboxHarness;
  proxy: LlmProxy;
  preset: string | null;
  sweGrade: SweGrade | null;
}

/**
 * `harness`: bring your own agent. The handler starts the rollout's LLM proxy on a Unix socket
 * in a private temp dir, starts a sandbox that reaches it (`OPENAI_BASE_URL` / `OPENAI_API_KEY`,
 * no other network), seeds it, and runs `command` there; the runtime's loop then answers the
 * command's chat requests (docs/proxy.md). Once the loop ends (the command exited, or a limit)
 * the eval runs `eval_command` in the same sandbox, in a fresh shell: exit 0 → resolved,
 * reward 1, else 0 — as the `shell` family. The proxy closes and its socket dir is removed when
 * the attempt ends, on every path. `act` is never called.
 */
export const harnessHandler: AgentHandler = {
  name: 'harness',
  async init(ctx) {
    const inst = parseInstance('harness', HarnessInstanceSchema, ctx.instance);
    const dir = await mkdtemp(join(tmpdir(), 'rollout-proxy-'));
    let proxy: LlmProxy | null = null;
    const cleanup = async (): Promise<void> => {
      await proxy?.close();
      await rm(dir, { recursive: true, force: true });
    };
    try {
      // The sandbox's own uid must reach the socket through the dir; the token is the gate.
      await chmod(dir, 0o755);
      const token = inst.api_key ?? `rk-${randomBytes(24).toString('hex')}`;
      proxy = await LlmProxy.listen({ socketPath: join(dir, 'llm.sock'), token });
      // Bound to the attempt: aborted when it ends on any path (done, failed, timed out, cancelled).
      if (ctx.signal.aborted) throw new SandboxError('harness init: the rollout ended', { stage: 'init' });
      ctx.signal.addEventListener('abort', () => void cleanup(), { once: true });
      // A preset's CLI must already be in the store: never a download at rollout time.
      const preset = inst.preset;
      const version = preset ? (inst.version ?? HARNESS_PRESETS[preset].defaultVersion) : '';
      const store = preset ? new HarnessStore() : null;
      if (preset) store!.require(preset, version);
      const spec: SandboxSpec = { files: inst.files, setup: inst.setup, network: false, llmProxy: { socketPath: proxy.socketPath, token }, ...(store ? { harnessStore: store.dir } : {}) };
      // `instance.image` applies as in every family (the agent and its eval run in that image).
      const sandbox = await withInstanceImage(ctx).createSandbox(spec);
      let command = inst.command ?? '';
      if (preset) {
        const baseUrl = sandbox.llmProxyUrl;
        if (!baseUrl) throw new SandboxError('harness init: the sandbox has no LLM proxy URL', { stage: 'init' });
        const run = { baseUrl, origin: baseUrl.replace(/\/v1$/, ''), apiKey: token, model: inst.model ?? HARNESS_PRESETS[preset].defaultModel, instruction: inst.instruction! };
        command = presetCommand({ preset, version, run, args: inst.args, env: inst.env, cwd: inst.cwd });
      }
      const agent = new SandboxHarness({ sandbox, command, proxy, limits: { maxLlmCalls: inst.max_llm_calls, maxTokensTotal: inst.max_tokens_total }, clock: ctx.clock });
      const state: HarnessState = { evalCommand: inst.eval_command, evalTimeoutMs: (inst.eval_timeout_s ?? 60) * 1000, agent, proxy, preset: preset ? `${preset}@${version}` : null, sweGrade: inst.swebench_grade ?? null };
      return { sandbox, messages: [], tools: [], external: agent, state };
    } catch (err) {
      if (!ctx.signal.aborted) await cleanup();
      throw err;
    }
  },
  act() {
    return Promise.reject(new TaskError('harness: act is never called; the loop answers the harness through its proxy', { code: 'HARNESS_ACT' }));
  },
  async eval(ctx) {
    const st = ctx.state as HarnessState;
    if (!ctx.sandbox) throw new SandboxError('harness eval: the run left no sandbox', { stage: 'eval' });
    await st.agent.stop('evaluating');
    await freshShellForEval(ctx.sandbox, ctx.signal);
    const r = await runToEnd(ctx.sandbox, st.evalCommand, st.evalTimeoutMs, ctx.signal, ctx.clock);
    let resolved = r.exitCode === 0;
    let report: Record<string, unknown> | null = null;
    let timedOut = r.timedOut;
    if (st.sweGrade) {
      timedOut ||= sweTestsTimedOut(r.output);
      // The log is the command's; a missing one (the command stopped before the tests) grades nothing.
      const log = resolved ? await ctx.sandbox.readFile(st.sweGrade.log_file).catch(() => '') : '';
      const graded = gradeSweLog(log, st.sweGrade);
      resolved = resolved && graded.resolved;
      report = graded.report as unknown as Record<string, unknown>;
    }
    return {
      reward: resolved ? 1 : 0,
      resolved,
      details: { ...(report ? { report } : {}), exit_code: r.exitCode, timed_out: timedOut, output: clip(r.output), harness_exit_code: st.agent.exitCode,
        harness_output: clip(st.agent.output),
        // The HTTP status of every request the harness made to its proxy, counted: an unanswered or refused call shows here.
        proxy_requests: Object.fromEntries([...st.proxy.stats.byStatus].map(([k, v]) => [String(k), v])),
        ...(st.preset ? { preset: st.preset } : {}),
      },
    };
  },
};
