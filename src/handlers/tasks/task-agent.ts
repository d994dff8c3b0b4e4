import type { ActContext, ActResult, AgentHandler, EvalContext, EvalResult, HandlerContext, InitResult, Observation } from '../agent-handler.js';
import { CancelledError } from '../../errors.js';
import type { Message, ToolSchema } from '../../protocol/messages.js';
import type { EditorRequest } from '../../sandbox/sandbox.js';

/**
 * The tools the built-in task handlers offer, with the OpenHands / ProRL names and arguments
 * (policies trained on those trajectories work unchanged), and the `act` that runs them on the
 * rollout's sandbox.
 *
 * This is the task handlers' own copy of the shared tool agent: the handlers must run before
 * `src/handlers/tool-agent.ts` lands, and swapping the import is the whole migration.
 */

/** `execute_bash {command, is_input?, timeout?}`. */
export const bashTool: ToolSchema = {
  type: 'function',
  function: {
    name: 'execute_bash',
    description:
      'Execute a bash command in the terminal. Long-running commands return after the timeout with the output so far: send an empty command to wait, `C-c` with is_input=true to interrupt. One command at a time.',
    parameters: {
      type: 'object',
      properties: {
        command: { type: 'string', description: 'The bash command; empty to read more output of the running one.' },
        is_input: { type: 'string', enum: ['true', 'false'], description: 'true: send the command as input to the running process (C-c, C-z, C-d allowed).' },
        timeout: { type: 'number', description: 'Seconds to wait for the command (default 30).' },
      },
      required: ['command'],
    },
  },
};

/** `str_replace_editor {command, path, file_text?, old_str?, new_str?, insert_line?, view_range?}`. */
export const editorTool: ToolSchema = {
  type: 'function',
  function: {
    name: 'str_replace_editor',
    description:
      'View, create and edit files. `view` shows numbered lines (or a directory listing); `create` writes a new file; `str_replace` replaces exactly one occurrence of old_str; `insert` adds new_str after insert_line; `undo_edit` reverts the last edit of the file.',
    parameters: {
      type: 'object',
      properties: {
        command: { type: 'string', enum: ['view', 'create', 'str_replace', 'insert', 'undo_edit'] },
        path: { type: 'string', description: 'Path of the file or directory (relative to /workspace, or absolute inside it).' },
        file_text: { type: 'string', description: 'Content of the file for `create`.' },
        old_str: { type: 'string', description: 'The exact text to replace for `str_replace`.' },
        new_str: { type: 'string', description: 'The new text for `str_replace` and `insert`.' },
        insert_line: { type: 'integer', description: 'Line after which `insert` adds new_str.' },
        view_range: { type: 'array', items: { type: 'integer' }, description: '[start, end] lines for `view`; end -1 for the end of the file.' },
      },
      required: ['command', 'path'],
    },
  },
};

/** `execute_ipython_cell {code}`. */
export const pythonTool: ToolSchema = {
  type: 'function',
  function: {
    name: 'execute_ipython_cell',
    description: 'Run Python code in a persistent interpreter. Variables persist between cells; the value of a final expression is shown.',
    parameters: { type: 'object', properties: { code: { type: 'string', description: 'The Python code to run.' } }, required: ['code'] },
  },
};

/** `finish {message?}`. */
export const finishTool: ToolSchema = {
  type: 'function',
  function: {
    name: 'finish',
    description: 'Finish the task. Put the final answer (or a summary of the work) in message.',
    parameters: { type: 'object', properties: { message: { type: 'string', description: 'The final answer or summary.' } }, required: [] },
  },
};

function policyError(callId: string, name: string, content: string): Observation {
  return { callId, name, content, error: true, policyError: true };
}

const asBool = (v: unknown): boolean => v === true || v === 'true';

async function runTool(ctx: ActContext, callId: string, name: string, args: Record<string, unknown>, offered: Set<string>): Promise<Observation> {
  if (!offered.has(name)) return policyError(callId, name, `Unknown tool '${name}'. Available tools: ${[...offered].join(', ')}.`);
  const sb = ctx.sandbox;
  if (!sb) return policyError(callId, name, `Tool '${name}' needs a sandbox and this task has none.`);
  const started = Date.now();
  if (name === 'execute_bash') {
    if (typeof args.command !== 'string') return policyError(callId, name, "execute_bash: 'command' must be a string.");
    const timeout = typeof args.timeout === 'number' && args.timeout > 0 ? args.timeout * 1000 : undefined;
    const r = await sb.bash({ command: args.command, isInput: asBool(args.is_input), timeoutMs: timeout }, ctx.signal);
    let content = r.output;
    if (r.timedOut) content += `\n[The command has no new output yet and is still running. Send an empty command to wait, or C-c with is_input=true to interrupt.]`;
    else content += `\n[Command finished with exit code ${r.exitCode}; cwd ${r.cwd}]`;
    return { callId, name, content, exitCode: r.exitCode, error: r.timedOut, latencyMs: Date.now() - started };
  }
  if (name === 'execute_ipython_cell') {
    if (typeof args.code !== 'string') return policyError(callId, name, "execute_ipython_cell: 'code' must be a string.");
    const r = await sb.python(args.code, {}, ctx.signal);
    const content = [r.output, r.error ?? '', r.timedOut ? '[The cell timed out and was interrupted.]' : ''].filter(Boolean).join('\n');
    return { callId, name, content: content || '[no output]', error: r.error !== null || r.timedOut, latencyMs: Date.now() - started };
  }
  // str_replace_editor
  const cmd = args.command;
  const path = args.path;
  if (typeof path !== 'string' || !['view', 'create', 'str_replace', 'insert', 'undo_edit'].includes(cmd as string)) {
    return policyError(callId, name, "str_replace_editor: needs 'command' (view|create|str_replace|insert|undo_edit) and a string 'path'.");
  }
  let req: EditorRequest;
  if (cmd === 'view') {
    const vr = args.view_range;
    const ok = Array.isArray(vr) && vr.length === 2 && vr.every((x) => Number.isInteger(x));
    req = { command: 'view', path, ...(ok ? { view_range: vr as [number, number] } : {}) };
  } else if (cmd === 'create') {
    if (typeof args.file_text !== 'string') return policyError(callId, name, "str_replace_editor create: 'file_text' must be a string.");
    req = { command: 'create', path, file_text: args.file_text };
  } else if (cmd === 'str_replace') {
    if (typeof args.old_str !== 'string') return policyError(callId, name, "str_replace_editor str_replace: 'old_str' must be a string.");
    req = { command: 'str_replace', path, old_str: args.old_str, new_str: typeof args.new_str === 'string' ? args.new_str : '' };
  } else if (cmd === 'insert') {
    if (!Number.isInteger(args.insert_line) || typeof args.new_str !== 'string') {
      return policyError(callId, name, "str_replace_editor insert: needs an integer 'insert_line' and a string 'new_str'.");
    }
    req = { command: 'insert', path, insert_line: args.insert_line as number, new_str: args.new_str };
  } else req = { command: 'undo_edit', path };
  const r = await sb.editor(req, ctx.signal);
  return { callId, name, content: r.output, error: r.error, latencyMs: Date.now() - started };
}

/**
 * Runs one assistant turn's tool calls in order on the sandbox and returns one `tool` message per
 * call. A `finish` call stops the loop (calls after it are not run); a turn without calls stops
 * with `no_tool_call`. Bad arguments and unknown tools become policy-error observations (the
 * model's own mistake, trainable). Sandbox faults propagate (SandboxError: retried).
 */
export function makeToolAct(tools: ToolSchema[]): (ctx: ActContext) => Promise<ActResult> {
  const offered = new Set(tools.map((t) => t.function.name));
  return async (ctx) => {
    const messages: Message[] = [];
    const observations: Observation[] = [];
    const push = (obs: Observation) => {
      observations.push(obs);
      messages.push({ role: 'tool', content: obs.content, tool_call_id: obs.callId, name: obs.name });
      ctx.onToolResult?.(obs);
    };
    let stop: ActResult['stop'] = null;
    for (const [i, bad] of ctx.malformed.entries()) push(policyError(`malformed-${ctx.turn}-${i}`, 'invalid_tool_call', `Could not parse tool call: ${bad.error}`));
    for (const [i, call] of ctx.assistant.tool_calls.entries()) {
      const callId = call.id ?? `call-${ctx.turn}-${i}`;
      ctx.onToolCall?.({ callId, name: call.name, arguments: call.arguments });
      if (call.name === 'finish' && offered.has('finish')) {
        push({ callId, name: 'finish', content: 'Task finished.' });
        stop = 'finish_tool';
        break;
      }
      if (ctx.signal.aborted) throw new CancelledError('cancelled while acting');
      push(await runTool(ctx, callId, call.name, call.arguments, offered));
    }
    if (ctx.assistant.tool_calls.length === 0 && ctx.malformed.length === 0) stop = 'no_tool_call';
    return { messages, observations, stop, state: ctx.state };
  };
}

/** What a task handler writes; {@link defineTaskHandler} adds the tool-running `act`. */
export interface TaskHandlerSpec {
  name: string;
  aliases?: readonly string[];
  /** The tools offered; `act` runs exactly these. */
  tools: ToolSchema[];
  init(ctx: HandlerContext): Promise<Omit<InitResult, 'tools'>>;
  eval(ctx: EvalContext): Promise<EvalResult>;
}

/** Builds an {@link AgentHandler} from `init` + `eval` and a tool list. Never throws. */
export function defineTaskHandler(spec: TaskHandlerSpec): AgentHandler {
  const act = makeToolAct(spec.tools);
  return {
    name: spec.name,
    ...(spec.aliases ? { aliases: spec.aliases } : {}),
    async init(ctx) {
      const r = await spec.init(ctx);
      return { ...r, tools: spec.tools };
    },
    act,
    eval: (ctx) => spec.eval(ctx),
  };
}
