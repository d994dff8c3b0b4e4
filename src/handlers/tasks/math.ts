import { z } from 'zod';
import type { AgentHandler } from '../../proxy/agent-contract.js';
import { extractMathAnswer, mathAnswersMatch } from './answer-check.js';
import { ChatPromptSchema, findAnswer, firstMessages, parseInstance } from './task-kit.js';
import type { TaskPrompt } from './task-kit.js';
import { defineToolAgent } from '../tool-agent.js';
import { toolSchemas } from '../tools.js';

/**
 * A math instance (DeepScaleR's fields, plus the usual aliases): the problem text in `problem`
 * (or `question`, or `prompt` as text or as veRL-style chat messages), the ground truth in `answer` (or `ground_truth`, or
 * `reward_model.ground_truth` as veRL datasets carry it).
 */
export const MathInstanceSchema = z
  .object({
    problem: z.string().min(1).optional(),
    prompt: z.union([z.string().min(1), ChatPromptSchema]).optional(),
    question: z.string().min(1).optional(),
    answer: z.union([z.string(), z.number()]).optional(),
    ground_truth: z.union([z.string(), z.number()]).optional(),
    reward_model: z.object({ ground_truth: z.union([z.string(), z.number()]) }).optional(),
  })
  .transform((v, ctx) => {
    const problem: TaskPrompt | undefined = v.problem ?? v.prompt ?? v.question;
    const truth = v.answer ?? v.ground_truth ?? v.reward_model?.ground_truth;
    if (problem === undefined) ctx.addIssue({ code: 'custom', path: ['problem'], message: "required: the problem text ('problem', 'prompt' or 'question')" });
    if (truth === undefined) ctx.addIssue({ code: 'custom', path: ['answer'], message: "required: the ground truth ('answer', 'ground_truth' or 'reward_model.ground_truth')" });
    return { problem: problem ?? '', groundTruth: String(truth ?? '') };
  });

const SYSTEM =
  'You are a careful mathematician. Solve the problem step by step. You may run Python with the ' +
  'execute_ipython_cell tool to check computations. When you are done, call finish with your ' +
  'final answer written as \\boxed{...}.';

/**
 * `math` (aliases `deepscaler`): a Python tool and `finish`; the answer is the last `\boxed{}`
 * of the finish message (or the last assistant text), compared with the ground truth by
 * {@link mathAnswersMatch}. Reward 1 when it matches, else 0.
 */
export const mathHandler: AgentHandler = defineToolAgent({
  name: 'math',
  aliases: ['deepscaler'],
  tools: toolSchemas(['execute_ipython_cell', 'finish']),
  async init(ctx) {
    const inst = parseInstance('math', MathInstanceSchema, ctx.instance);
    // The Python tool needs a sandbox; an empty one starts in milliseconds.
    const sandbox = await ctx.createSandbox({});
    return {
      sandbox,
      messages: firstMessages(SYSTEM, inst.problem),
      state: { groundTruth: inst.groundTruth },
    };
  },
  async eval(ctx) {
    const { groundTruth } = ctx.state as { groundTruth: string };
    const found = findAnswer(ctx.messages, extractMathAnswer);
    const resolved = found !== null && mathAnswersMatch(found.value, groundTruth);
    return { reward: resolved ? 1 : 0, resolved, details: { answer: found?.value ?? null, ground_truth: groundTruth } };
  },
});
