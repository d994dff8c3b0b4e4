import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { CancelledError, InfraError, SandboxError } from '../../errors.js';
import type { AgentHandler } from '../../proxy/agent-contract.js';
import { CODE_RUNNER_PY } from './code-runner.js';
import { GroundTruthError, testsFromGroundTruth, type CodeTest } from './code-ground-truth.js';
import { ChatPromptSchema, clip, firstMessages, parseInstance, runToEnd } from './task-kit.js';
import { evalFault } from './eval-fault.js';
import type { TaskPrompt } from './task-kit.js';
import { defineToolAgent } from '../tool-agent.js';
import { toolSchemas } from '../tools.js';

const TestSchema = z.union([
  z.object({ input: z.string(), output: z.string() }).strict(),
  z.object({ code: z.string().min(1), name: z.string().optional() }).strict(),
]);

/**
 * A code instance: `problem` (or `question`, or `prompt` as text or chat messages), hidden `tests`
 * (or, in DeepCoder / Eurus / APPS form, `reward_model.ground_truth` or `input_output`) — each either
 * `{input, output}` (the solution reads stdin, its stdout must match) or `{code}` (a Python script
 * that imports the solution module and exits 0 when it passes) — and optionally
 * `solution_file` (default `solution.py`), `starter_code` (written to the solution file),
 * `files` (extra workspace files), `timeout_s` per test (default 10) and `reward_mode`.
 */
export const CodeInstanceSchema = z
  .object({
    problem: z.string().min(1).optional(),
    prompt: z.union([z.string().min(1), ChatPromptSchema]).optional(),
    question: z.string().min(1).optional(),
    tests: z.array(TestSchema).min(1).optional(),
    /** DeepCoder / Eurus rows: tests in `reward_model.ground_truth` (see code-ground-truth.ts). */
    reward_model: z.object({ ground_truth: z.unknown() }).passthrough().optional(),
    /** APPS / TACO rows: tests in `input_output`, the same format. */
    input_output: z.unknown().optional(),
    solution_file: z
      .string()
      .regex(/^[\w][\w./-]*\.py$/, 'a relative .py path')
      .refine((p) => !p.split('/').includes('..'), 'must stay inside the workspace')
      .default('solution.py'),
    starter_code: z.string().optional(),
    files: z.record(z.string().min(1), z.string()).optional(),
    timeout_s: z.number().positive().max(600).default(10),
    /** `all` (default): reward 1 only when every test passes. `fraction`: passed / total. */
    reward_mode: z.enum(['all', 'fraction']).default('all'),
  })
  .transform((v, ctx) => {
    const problem: TaskPrompt | undefined = v.problem ?? v.prompt ?? v.question;
    if (problem === undefined) ctx.addIssue({ code: 'custom', path: ['problem'], message: "required: the problem text ('problem', 'prompt' or 'question')" });
    let tests: CodeTest[] = v.tests ?? [];
    if (!v.tests) {
      const gt = v.reward_model?.ground_truth ?? v.input_output;
      const path = v.reward_model?.ground_truth !== undefined ? ['reward_model', 'ground_truth'] : v.input_output !== undefined ? ['input_output'] : ['tests'];
      if (gt === undefined || gt === null) ctx.addIssue({ code: 'custom', path, message: "required: the tests ('tests', 'reward_model.ground_truth' or 'input_output')" });
      else {
        try {
          tests = testsFromGroundTruth(gt, v.solution_file);
        } catch (err) {
          if (!(err instanceof GroundTruthError)) throw err;
          ctx.addIssue({ code: 'custom', path, message: err.message });
        }
      }
    }
    return { ...v, problem: problem ?? '', tests };
  });
type CodeInstance = z.output<typeof CodeInstanceSchema>;

const system = (file: string) =>
  'You are an expert Python programmer working in /workspace. Write a complete solution to the ' +
  `problem in ${file}. You may run code with execute_bash or execute_ipython_cell to test it. ` +
  'Hidden tests will run your file after you call finish.';

/**
 * `code` (aliases `deepcoder`, `codecontests`, `apps`, `codeforces`, `taco`, and any data source
 * starting with `deepcoder`, as the reference routes them): the agent writes a solution file with bash / editor / Python; the
 * eval copies that one file into a FRESH sandbox together with the hidden tests (never seen by the
 * agent, who cannot tamper with them) and runs them there. Reward: 1 when all tests pass, 0
 * otherwise (`reward_mode: "fraction"` gives passed / total); `resolved` means all passed.
 * Throws SandboxError when the eval sandbox does not report a result.
 */
export const codeHandler: AgentHandler = defineToolAgent({
  name: 'code',
  aliases: ['deepcoder', 'codecontests', 'apps', 'codeforces', 'taco'],
  prefixes: ['deepcoder'],
  tools: toolSchemas(['execute_bash', 'str_replace_editor', 'execute_ipython_cell', 'think', 'finish']),
  async init(ctx) {
    const inst = parseInstance('code', CodeInstanceSchema, ctx.instance);
    const files = { ...inst.files, ...(inst.starter_code !== undefined ? { [inst.solution_file]: inst.starter_code } : {}) };
    const sandbox = await ctx.createSandbox({ files });
    return {
      sandbox,
      messages: firstMessages(system(inst.solution_file), inst.problem),
      state: inst,
    };
  },
  async eval(ctx) {
    const inst = ctx.state as CodeInstance;
    let solution: string;
    if (!ctx.sandbox) throw new SandboxError('code eval: the run left no sandbox', { stage: 'eval' });
    try {
      solution = await ctx.sandbox.readFile(inst.solution_file);
    } catch (err) {
      // A lost sandbox is the infrastructure's fault (retried); only a missing file is the policy's.
      if (err instanceof InfraError || err instanceof CancelledError) throw err;
      return { reward: 0, resolved: false, details: { passed: 0, total: inst.tests.length, error: `no ${inst.solution_file} was written` } };
    }
    const sb = await ctx.createSandbox({
      files: {
        ...inst.files,
        [inst.solution_file]: solution,
        '.eval/run.py': CODE_RUNNER_PY,
        '.eval/tests.json': JSON.stringify({ solution_file: inst.solution_file, timeout_s: inst.timeout_s, tests: inst.tests }),
      },
    });
    try {
      const budget = (inst.timeout_s * inst.tests.length + 30) * 1000;
      const nonce = randomBytes(16).toString('hex');
      const r = await runToEnd(sb, `python3 .eval/run.py <<< ${nonce}`, budget, ctx.signal, ctx.clock);
      // The verdict is the runner's own last line, with this eval's nonce, from a runner that
      // exited 0 (code-runner.ts): a solution that killed it or wrote its result file is not believed.
      const done = [...r.output.matchAll(/^CODE_EVAL_DONE ([0-9a-f]{32}) (\{"passed": \d+, "total": \d+\})\s*$/gm)].pop();
      if (r.exitCode !== 0 || !done || done[1] !== nonce) {
        return { reward: 0, resolved: false, details: { passed: 0, total: inst.tests.length, error: `the test runner did not finish (exit ${r.exitCode ?? 'none'}): ${clip(r.output, 500)}` } };
      }
      const res = JSON.parse(done[2]!) as { passed: number; total: number };
      // The per-test reasons from the file, only where they agree with the verdict (the solution could have written it).
      let failures: { test: number; why: string }[] = [];
      try {
        const file = JSON.parse(await sb.readFile('.eval/result.json')) as { passed?: unknown; total?: unknown; results?: { why?: unknown }[] };
        if (file.passed === res.passed && file.total === res.total && Array.isArray(file.results)) failures = file.results.map((x, i) => ({ test: i, why: typeof x?.why === 'string' ? x.why : '' })).filter((x) => x.why);
      } catch (err) {
        // Only the details are lost; a lost sandbox is still rethrown (eval-fault.ts).
        if (evalFault(err, true) === 'rethrow') throw err;
      }
      const resolved = res.total > 0 && res.passed === res.total;
      const reward = inst.reward_mode === 'fraction' ? res.passed / res.total : resolved ? 1 : 0;
      return { reward, resolved, details: { passed: res.passed, total: res.total, failures } };
    } finally {
      await sb.close();
    }
  },
});
