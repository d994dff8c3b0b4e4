import type { ActContext, ActResult, AgentHandler, EvalContext, EvalResult, HandlerContext, InitResult, Observation } from '../proxy/agent-contract.js';
import type { Message, ToolCall, ToolSchema } from '../protocol/messages.js';
import { runToolCall } from './tools.js';
import { withInstanceImage } from '../sandbox/images/instance-image.js';

/**
 * The shared agent step: runs the tool calls of the last assistant turn one after the other
 * against the sandbox, and turns each result into a `tool` message.
 *
 * - a `finish` call stops the loop with `finish_tool` (calls after it in the same turn are not run);
 * - a turn with neither tool calls nor malformed blocks stops it with `no_tool_call`;
 * - malformed tool-call blocks and bad arguments come back to the model as error observations
 *   marked `policyError` (trainable mistakes, not faults) and the loop goes on;
 * - sandbox faults and cancellation propagate (the runtime retries or ends the rollout).
 *
 * Tools not among `ctx`'s offered tools are refused (policyError). Tool calls without an id
 * get `call_<turn>_<index>`.
 */
export async function toolAgentAct(ctx: ActContext, offeredTools: readonly ToolSchema[]): Promise<ActResult> {
  let offered = offeredSets.get(offeredTools);
  if (!offered) offeredSets.set(offeredTools, (offered = new Set(offeredTools.map((t) => t.function.name))));
  const messages: Message[] = [];
  const observations: Observation[] = [];
  let stop: ActResult['stop'] = null;

  const malformed = ctx.malformed;
  for (let i = 0; i < malformed.length; i++) {
    const m = malformed[i]!;
    const obs: Observation = {
      callId: `malformed_${ctx.turn}_${i}`,
      name: 'invalid_tool_call',
      content: `Error: could not parse the tool call (${m.error}). Write each call as <tool_call>{"name": ..., "arguments": {...}}</tool_call>.`,
      error: true,
      policyError: true,
      exitCode: null,
    };
    observations.push(obs);
    messages.push({ role: 'tool', content: obs.content, name: obs.name, tool_call_id: obs.callId });
    ctx.onToolResult?.(obs);
  }

  const calls = ctx.assistant.tool_calls;
  for (let i = 0; i < calls.length; i++) {
    const c = calls[i]!;
    const id = c.id ?? `call_${ctx.turn}_${i}`;
    c.id = id;
    ctx.onToolCall?.({ callId: id, name: c.name, arguments: c.arguments });
    const obs = await runToolCall(ctx.sandbox, c as ToolCall & { id: string }, offered, ctx.signal, ctx.clock);
    ctx.onToolResult?.(obs);
    observations.push(obs);
    if (c.name === 'finish' && !obs.error) {
      stop = 'finish_tool';
      break;
    }
    messages.push({ role: 'tool', content: obs.content, name: c.name, tool_call_id: id });
  }
  if (stop === null && calls.length === 0 && ctx.malformed.length === 0) stop = 'no_tool_call';
  return { messages, observations, stop, state: ctx.state };
}

// The offered-tool set of each tools array, built once rather than on every turn.
const offeredSets = new WeakMap<readonly ToolSchema[], ReadonlySet<string>>();

/** What {@link defineToolAgent} needs: a name, and `init` + `eval`. */
export interface ToolAgentDefinition {
  name: string;
  aliases?: readonly string[] | undefined;
  /** `data_source` prefixes routed to this handler. */
  prefixes?: readonly string[] | undefined;
  /**
   * Builds the first messages and the sandbox. `tools` in the result overrides the
   * definition's default tools.
   */
  init(ctx: HandlerContext): Promise<Omit<InitResult, 'tools'> & { tools?: ToolSchema[] | undefined }>;
  eval(ctx: EvalContext): Promise<EvalResult>;
  /** The tools offered when `init` gives none (default: none). */
  tools?: readonly ToolSchema[] | undefined;
}

/**
 * Builds an {@link AgentHandler} from `init` + `eval`, using the shared {@link toolAgentAct}.
 * The tools offered are remembered in the handler state, so `act` refuses tools the model was
 * not given.
 */
export function defineToolAgent(def: ToolAgentDefinition): AgentHandler {
  // One array for every rollout that uses the default tools (not a copy per rollout): the codec
  // and toolAgentAct cache per tools array, and it is frozen so no rollout can change another's.
  const defaultTools = Object.freeze([...(def.tools ?? [])]) as ToolSchema[];
  return {
    name: def.name,
    ...(def.aliases ? { aliases: def.aliases } : {}),
    ...(def.prefixes ? { prefixes: def.prefixes } : {}),
    async init(ctx) {
      const r = await def.init(withInstanceImage(ctx));
      const tools = r.tools ?? defaultTools;
      return { messages: r.messages, tools, sandbox: r.sandbox, state: { tools, user: r.state } satisfies ToolAgentState };
    },
    act(ctx) {
      // ctx.state is this handler's own state; toolAgentAct hands it back unchanged.
      return toolAgentAct(ctx, (ctx.state as ToolAgentState).tools);
    },
    async eval(ctx) {
      // Object.assign then a set, not `{ ...ctx, state }`: the spread with an extra key is ~10x slower.
      const userCtx = Object.assign({}, ctx);
      userCtx.state = (ctx.state as ToolAgentState).user;
      return def.eval(withInstanceImage(userCtx));
    },
  };
}

interface ToolAgentState {
  tools: ToolSchema[];
  user: unknown;
}
