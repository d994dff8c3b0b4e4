import { z } from 'zod';
import type { AgentHandler } from '../../proxy/agent-contract.js';
import { choiceLetters, extractChoice } from './answer-check.js';
import { findAnswer, parseInstance } from './task-kit.js';
import { defineToolAgent } from '../tool-agent.js';
import { toolSchemas } from '../tools.js';

/**
 * A multiple-choice instance: `question` (or `problem` / `prompt`), `choices` as a list (lettered
 * A, B, ... in order) or a map from letter to text, and `answer` as the letter, or the 0-based
 * index of the right choice. At most 26 choices.
 */
export const StemInstanceSchema = z
  .object({
    question: z.string().min(1).optional(),
    problem: z.string().min(1).optional(),
    prompt: z.string().min(1).optional(),
    choices: z.union([z.array(z.string()).min(2).max(26), z.record(z.string().regex(/^[A-Za-z]$/), z.string())]),
    answer: z.union([z.string().regex(/^\s*\(?[A-Za-z]\)?\s*$/, 'a choice letter'), z.number().int().min(0)]),
  })
  .transform((v, ctx) => {
    const question = v.question ?? v.problem ?? v.prompt;
    if (question === undefined) ctx.addIssue({ code: 'custom', path: ['question'], message: "required: the question text ('question', 'problem' or 'prompt')" });
    const entries: [string, string][] = Array.isArray(v.choices)
      ? v.choices.map((c, i) => [choiceLetters(i + 1)[i] as string, c])
      : Object.entries(v.choices).map(([k, c]) => [k.toUpperCase(), c] as [string, string]).sort((a, b) => a[0].localeCompare(b[0]));
    const letters = entries.map((e) => e[0]);
    const answer = typeof v.answer === 'number' ? letters[v.answer] : v.answer.replace(/[()\s]/g, '').toUpperCase();
    if (answer === undefined || !letters.includes(answer)) {
      ctx.addIssue({ code: 'custom', path: ['answer'], message: `must name one of the choices (${letters.join(', ')})` });
    }
    return { question: question ?? '', entries, letters, answer: answer ?? '' };
  });

const SYSTEM =
  'Answer the multiple-choice question. Think it through, then call finish with the letter of ' +
  'the single best choice written as \\boxed{X}.';

/**
 * `stem`: multiple choice, no sandbox, the `finish` tool only. The chosen letter is read from the
 * finish message (or the last assistant text): `\boxed{X}`, "the answer is (X)", a bare letter,
 * or a choice's exact text. Reward 1 for the right letter, else 0.
 */
export const stemHandler: AgentHandler = defineToolAgent({
  name: 'stem',
  aliases: ['gpqa', 'mmlu'],
  tools: toolSchemas(['finish']),
  async init(ctx) {
    const inst = parseInstance('stem', StemInstanceSchema, ctx.instance);
    const body = `${inst.question}\n\n${inst.entries.map(([l, c]) => `${l}. ${c}`).join('\n')}`;
    return {
      messages: [
        { role: 'system', content: SYSTEM },
        { role: 'user', content: body },
      ],
      state: { letters: inst.letters, texts: inst.entries.map((e) => e[1]), answer: inst.answer },
    };
  },
  async eval(ctx) {
    const st = ctx.state as { letters: string[]; texts: string[]; answer: string };
    const found = findAnswer(ctx.messages, (t) => extractChoice(t, st.letters, st.texts));
    const resolved = found?.value === st.answer;
    return { reward: resolved ? 1 : 0, resolved, details: { choice: found?.value ?? null, answer: st.answer } };
  },
});
