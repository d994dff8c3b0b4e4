import { z } from 'zod';
import { TaskError } from '../../errors.js';
import type { Instance } from '../../protocol/instance.js';
import type { Message } from '../../protocol/messages.js';
import type { BashResult, Sandbox } from '../../sandbox/sandbox.js';
import { withoutShellNote } from '../../sandbox/output.js';
import type { Clock } from '../../clock.js';

/**
 * Small helpers every built-in task handler shares: instance validation that names the bad
 * field, and reading the agent's final answer out of the conversation.
 */

/**
 * A prompt given as chat messages, as veRL-style datasets store it (`prompt: [{role, content}]`).
 */
export const ChatPromptSchema = z.array(z.object({ role: z.enum(['system', 'user', 'assistant']), content: z.string() })).min(1);
/** A prompt: plain text, or chat messages. */
export type TaskPrompt = string | z.infer<typeof ChatPromptSchema>;

/**
 * The first messages of a rollout: the handler's system prompt and the task as a user message;
 * a chat-message prompt is used as given, behind the system prompt unless it brings its own.
 */
export function firstMessages(system: string, prompt: TaskPrompt): Message[] {
  if (typeof prompt === 'string') {
    return [
      { role: 'system', content: system },
      { role: 'user', content: prompt },
    ];
  }
  return prompt.some((m) => m.role === 'system') ? [...prompt] : [{ role: 'system', content: system }, ...prompt];
}

/**
 * Parses a handler's own instance fields with `schema`. Throws a {@link TaskError} (a broken
 * task: never retried) whose message names the family and each bad field, e.g.
 * `math instance: field 'answer': expected string or number`.
 */
export function parseInstance<S extends z.ZodType>(family: string, schema: S, instance: Instance): z.infer<S> {
  const parsed = schema.safeParse(instance);
  if (parsed.success) return parsed.data;
  const issues = parsed.error.issues.map((i) => ({ path: i.path.map(String).join('.') || '(instance)', message: i.message }));
  const text = issues.map((i) => `field '${i.path}': ${i.message}`).join('; ');
  throw new TaskError(`${family} instance ${instance.instance_id ?? ''}: ${text}`.replace(/ :/, ':'), { stage: 'init', details: { issues } });
}

/**
 * The texts an answer may be read from, most authoritative first: the `message` of the last
 * `finish` call, then the content of each assistant turn from the last back.
 */
export function answerTexts(messages: Message[]): string[] {
  const out: string[] = [];
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i] as Message;
    if (m.role !== 'assistant') continue;
    const fin = m.tool_calls?.find((c) => c.name === 'finish');
    const msg = fin?.arguments.message;
    if (typeof msg === 'string' && msg.trim()) {
      out.unshift(msg);
      break;
    }
  }
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i] as Message;
    if (m.role === 'assistant' && m.content.trim()) out.push(m.content);
  }
  return out;
}

/** Returns the first non-null result of `extract` over {@link answerTexts}, with the text it came from. */
export function findAnswer<T>(messages: Message[], extract: (text: string) => T | null): { value: T; from: string } | null {
  for (const text of answerTexts(messages)) {
    const value = extract(text);
    if (value !== null) return { value, from: text };
  }
  return null;
}

/** Clips long text (test output in eval details) to its head and tail. */
export function clip(text: string, max = 2000): string {
  if (text.length <= max) return text;
  const half = Math.floor(max / 2);
  return `${text.slice(0, half)}\n[... ${text.length - max} characters cut ...]\n${text.slice(-half)}`;
}

/**
 * Interrupts a command the agent left running (a server, a `sleep`), so the eval's own command is
 * not refused as "a command is still running". Harmless when the shell is idle.
 */
export async function settleShell(sandbox: Sandbox, signal: AbortSignal): Promise<void> {
  await sandbox.bash({ command: 'C-c', isInput: true, timeoutMs: 5_000 }, signal);
}

/**
 * Gets the sandbox ready for an eval in its own workspace: a fresh shell (`Sandbox.resetShell`),
 * so nothing the policy defined in its shell (a `grep` function, an alias, an edited
 * PROMPT_COMMAND that reports every exit as 0) or left running answers for the eval; a sandbox
 * without one has its running command interrupted ({@link settleShell}).
 */
export async function freshShellForEval(sandbox: Sandbox, signal: AbortSignal): Promise<void> {
  if (sandbox.resetShell) await sandbox.resetShell();
  else await settleShell(sandbox, signal);
}

/**
 * Runs an eval command to its end or `timeoutMs`, whichever comes first. The bash tool returns
 * after its no-new-output timeout (30 s by default) with the command still running — right for a
 * model, wrong for a silent test suite — so this keeps waiting (empty commands) until the command
 * exits or the deadline passes, then interrupts it. The result's output is all of it, without
 * the shell's notes to a model; `exitCode` is null and `timedOut` true when it did not finish.
 */
export async function runToEnd(sandbox: Sandbox, command: string, timeoutMs: number, signal: AbortSignal, clock: Clock): Promise<BashResult> {
  const deadline = clock.now() + timeoutMs;
  let r = await sandbox.bash({ command, timeoutMs }, signal);
  // The shell's "[The command has not finished...]" notes are for a model: without them the
  // pieces join into what the command printed (a parser of the output sees no note mid-line).
  let output = withoutShellNote(r.output);
  while (r.timedOut && r.exitCode === null) {
    const left = deadline - clock.now();
    if (left <= 0) {
      await sandbox.bash({ command: 'C-c', isInput: true, timeoutMs: 5_000 }, signal);
      break;
    }
    r = await sandbox.bash({ command: '', timeoutMs: Math.ceil(left) }, signal);
    output += withoutShellNote(r.output);
  }
  return { ...r, output, timedOut: r.exitCode === null };
}

/** Quotes a string for a POSIX shell. */
export function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}
