import { z } from 'zod';
import type { ToolCall, ToolSchema } from '../protocol/messages.js';
import type { Sandbox } from '../sandbox/sandbox.js';
import type { Clock } from '../clock.js';
import type { Observation } from '../proxy/agent-contract.js';

/**
 * The tools of the shared tool agent, with the names and arguments of OpenHands / ProRL Agent
 * so prompts and trained policies carry over: `execute_bash`, `str_replace_editor`,
 * `execute_ipython_cell`, `think`, `finish`.
 */

/** Names of the built-in tools. */
export type ToolName = 'execute_bash' | 'str_replace_editor' | 'execute_ipython_cell' | 'think' | 'finish';

const bashArgs = z.object({
  command: z.string(),
  is_input: z.union([z.boolean(), z.enum(['true', 'false'])]).optional(),
  /** Seconds, as in OpenHands. */
  timeout: z.number().positive().optional(),
});
const editorArgs = z.discriminatedUnion('command', [
  z.object({ command: z.literal('view'), path: z.string().min(1), view_range: z.tuple([z.number().int(), z.number().int()]).optional() }),
  z.object({ command: z.literal('create'), path: z.string().min(1), file_text: z.string() }),
  z.object({ command: z.literal('str_replace'), path: z.string().min(1), old_str: z.string().min(1), new_str: z.string().optional() }),
  z.object({ command: z.literal('insert'), path: z.string().min(1), insert_line: z.number().int(), new_str: z.string() }),
  z.object({ command: z.literal('undo_edit'), path: z.string().min(1) }),
]);
const ipythonArgs = z.object({ code: z.string() });
const finishArgs = z.object({ message: z.string().optional() });
const thinkArgs = z.object({ thought: z.string() });

/** Tool schemas as offered to the model (OpenAI function-tool form). */
export const TOOL_SCHEMAS: Readonly<Record<ToolName, ToolSchema>> = Object.freeze({
  execute_bash: {
    type: 'function',
    function: {
      name: 'execute_bash',
      description:
        'Execute a bash command in the terminal. Long-running commands: run them in the background. Send `C-c` with is_input=true to interrupt. Output over 10,000 characters is truncated.',
      parameters: {
        type: 'object',
        properties: {
          command: { type: 'string', description: 'The bash command to execute. Empty to read more output of the running command.' },
          is_input: { type: 'string', enum: ['true', 'false'], description: 'If true, the command is input to the running process.' },
          timeout: { type: 'number', description: 'Timeout in seconds for this command.' },
        },
        required: ['command'],
      },
    },
  },
  str_replace_editor: {
    type: 'function',
    function: {
      name: 'str_replace_editor',
      description: 'Custom editing tool for viewing, creating and editing files. State persists across calls.',
      parameters: {
        type: 'object',
        properties: {
          command: { type: 'string', enum: ['view', 'create', 'str_replace', 'insert', 'undo_edit'] },
          path: { type: 'string', description: 'Path to the file, relative to /workspace or absolute under it.' },
          file_text: { type: 'string', description: 'Content of the file to create.' },
          old_str: { type: 'string', description: 'Exact text to replace (must match once).' },
          new_str: { type: 'string', description: 'Replacement text, or the text to insert.' },
          insert_line: { type: 'integer', description: 'Insert new_str after this line.' },
          view_range: { type: 'array', items: { type: 'integer' }, description: '[start, end] lines to view; end -1 for the rest.' },
        },
        required: ['command', 'path'],
      },
    },
  },
  execute_ipython_cell: {
    type: 'function',
    function: {
      name: 'execute_ipython_cell',
      description: 'Run a cell of Python code in a persistent interpreter.',
      parameters: { type: 'object', properties: { code: { type: 'string', description: 'The Python code.' } }, required: ['code'] },
    },
  },
  think: {
    type: 'function',
    function: {
      name: 'think',
      description:
        'Think about something: brainstorm, plan, or reason about the problem. The thought is recorded in the conversation; it does not change the workspace and the tool returns nothing.',
      parameters: { type: 'object', properties: { thought: { type: 'string', description: 'The thought.' } }, required: ['thought'] },
    },
  },
  finish: {
    type: 'function',
    function: {
      name: 'finish',
      description: 'Signals that the task is done.',
      parameters: { type: 'object', properties: { message: { type: 'string', description: 'Final message.' } }, required: [] },
    },
  },
});

/** Every built-in tool name, in a stable order. */
export const ALL_TOOLS: readonly ToolName[] = ['execute_bash', 'str_replace_editor', 'execute_ipython_cell', 'think', 'finish'];

/** Schemas for the named tools. Throws on an unknown name. */
export function toolSchemas(names: readonly ToolName[] = ALL_TOOLS): ToolSchema[] {
  return names.map((n) => {
    const s = TOOL_SCHEMAS[n];
    if (!s) throw new Error(`unknown tool ${n}`);
    return s;
  });
}

/**
 * Runs one tool call against a sandbox and returns its observation. Bad arguments, an unknown
 * or not-offered tool, or a missing sandbox become an error observation with `policyError`
 * (the model's mistake, reported back to it) rather than a throw. Sandbox faults
 * (SandboxError) and cancellation propagate. `finish` returns an empty observation; the
 * caller stops the loop.
 */
export async function runToolCall(
  sandbox: Sandbox | undefined,
  call: ToolCall & { id: string },
  offered: ReadonlySet<string>,
  signal: AbortSignal,
  clock: Clock,
): Promise<Observation> {
  // Module-level helpers rather than closures per call: this runs for every tool call.
  if (!offered.has(call.name)) return policyError(call, `Error: unknown tool '${call.name}'. Available tools: ${[...offered].join(', ')}.`);
  const t0 = clock.now();
  switch (call.name as ToolName) {
    case 'finish': {
      const a = finishArgs.safeParse(call.arguments);
      if (!a.success) return policyError(call, `Error: invalid arguments for finish: ${issues(a.error)}`);
      return finished(call, clock.now() - t0, { content: a.data.message ?? '', exitCode: null });
    }
    case 'think': {
      // The thought already sits in the assistant message's tool call: nothing to run, nothing to return (as the reference's think tool).
      const a = thinkArgs.safeParse(call.arguments);
      if (!a.success) return policyError(call, `Error: invalid arguments for think: ${issues(a.error)}`);
      return finished(call, clock.now() - t0, { content: '', exitCode: null });
    }
    case 'execute_bash': {
      const a = bashArgs.safeParse(call.arguments);
      if (!a.success) return policyError(call, `Error: invalid arguments for execute_bash: ${issues(a.error)}`);
      if (!sandbox) return policyError(call, 'Error: this task has no sandbox to run commands in.');
      const isInput = a.data.is_input === true || a.data.is_input === 'true';
      const r = await sandbox.bash({ command: a.data.command, isInput, timeoutMs: a.data.timeout ? a.data.timeout * 1000 : undefined }, signal);
      let content = r.output;
      if (r.timedOut) content += `\n[The command has no new output after its timeout. It may still be running: send empty command to wait, or C-c with is_input=true to interrupt.]`;
      else if (r.exitCode !== null) content += `\n[Command finished with exit code ${r.exitCode}]`;
      return finished(call, clock.now() - t0, { content, exitCode: r.exitCode, error: r.exitCode !== null && r.exitCode !== 0 });
    }
    case 'str_replace_editor': {
      const a = editorArgs.safeParse(call.arguments);
      if (!a.success) return policyError(call, `Error: invalid arguments for str_replace_editor: ${issues(a.error)}`);
      if (!sandbox) return policyError(call, 'Error: this task has no sandbox to edit files in.');
      const r = await sandbox.editor(a.data, signal);
      return finished(call, clock.now() - t0, { content: r.output, error: r.error, exitCode: null });
    }
    case 'execute_ipython_cell': {
      const a = ipythonArgs.safeParse(call.arguments);
      if (!a.success) return policyError(call, `Error: invalid arguments for execute_ipython_cell: ${issues(a.error)}`);
      if (!sandbox) return policyError(call, 'Error: this task has no sandbox to run Python in.');
      const r = await sandbox.python(a.data.code, {}, signal);
      let content = r.output + (r.error ? r.error : '');
      if (r.timedOut) content += '\n[The cell timed out.]';
      return finished(call, clock.now() - t0, { content, error: r.error !== null || r.timedOut, exitCode: null });
    }
    default:
      return policyError(call, `Error: tool '${call.name}' has no implementation.`);
  }
}

function policyError(call: ToolCall & { id: string }, content: string): Observation {
  return { callId: call.id, name: call.name, content, error: true, policyError: true, exitCode: null };
}

function finished(call: ToolCall & { id: string }, latencyMs: number, o: Omit<Observation, 'callId' | 'name'>): Observation {
  const obs = o as Observation;
  obs.callId = call.id;
  obs.name = call.name;
  obs.latencyMs = latencyMs;
  return obs;
}

function issues(err: z.ZodError): string {
  return err.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
}
