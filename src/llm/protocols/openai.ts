import { z } from 'zod';
import type { Message, ToolCall } from '../../protocol/messages.js';
import type { ChatCodec } from '../chat-codec.js';
import { reasoningApart } from '../harmony-codec.js';
import { TOOL_PARSERS, type WrittenCall } from '../tool-parsers/index.js';
import type { ChatContext, LogprobSemantics } from '../llm-client.js';
import { checkAligned, finiteLogprob, stopOf, type ParsedGeneration, type ProtocolAdapter } from './protocol.js';

const ToolCallOut = z.object({
  id: z.string().nullable().optional(),
  type: z.string().nullable().optional(),
  function: z.object({ name: z.string(), arguments: z.union([z.string(), z.record(z.string(), z.unknown())]).nullable().optional() }),
});

/** The parts of an OpenAI `/v1/chat/completions` answer we read (plus vLLM's token-id extensions). */
export const OpenAiChatResponseSchema = z.object({
  /** vLLM with `return_token_ids`: the prompt as the server's chat template rendered it. */
  prompt_token_ids: z.array(z.number().int()).nullable().optional(),
  choices: z
    .array(
      z.object({
        message: z.object({
          content: z.string().nullable().optional(),
          /** vLLM / SGLang reasoning parsers split the think block out of `content`. */
          reasoning_content: z.string().nullable().optional(),
          tool_calls: z.array(ToolCallOut).nullable().optional(),
        }),
        finish_reason: z.string().nullable().optional(),
        /** vLLM with `return_token_ids`: the sampled ids, end-of-turn token included. */
        token_ids: z.array(z.number().int()).nullable().optional(),
        logprobs: z
          .object({ content: z.array(z.object({ token: z.string().optional(), logprob: z.number().nullable() }).passthrough()).nullable().optional() })
          .nullable()
          .optional(),
      }),
    )
    .min(1),
});

/**
 * OpenAI chat completions (`POST {base}/chat/completions`, base ending in `/v1`): vLLM, SGLang,
 * llama.cpp server or any OpenAI-compatible endpoint — the reference's default (litellm) mode.
 *
 * Sends the conversation (`req.chat`) as OpenAI messages with tools in function-calling form
 * (tool-call `arguments` as JSON strings), and `temperature`, `top_p`, `max_tokens`, `stop`,
 * `seed`, plus `logprobs: true` and vLLM's `return_token_ids` (dropped, and remembered, by a server
 * that refuses it; likewise `top_k` and `chat_template_kwargs`).
 *
 * Tokens: when the server returns the sampled ids (`choices[0].token_ids`) they are the turn's
 * ids and `logprobs.content` their logprobs (`tokenSource: 'engine'`; a missing or non-finite
 * logprob is an error); `prompt_token_ids` comes back as `enginePromptIds` for the drift check.
 * Otherwise the reply (content, reasoning, tool calls) is rendered with the rollout's codec
 * (`codec.encodeAssistant`; the end-of-turn token left off a turn cut by `length`) and marked
 * `tokenSource: 'retokenized'`; its logprobs are the server's when they line up one to one with
 * those ids, else 0 with `logprobSemantics: 'none'`.
 *
 * The trajectory's prompt ids stay the runtime's own append-only render: the server renders its
 * own template from the messages each turn, and a difference shows up as drift, never as a
 * rewrite of earlier tokens.
 */
export const openaiProtocol: ProtocolAdapter = {
  name: 'openai',
  generatePath: '/chat/completions',
  healthPath: '/models',
  modelsPath: '/models',
  optionalFields: ['return_token_ids', 'top_k', 'chat_template_kwargs'],
  logprobSemantics: 'unknown',
  body(req, model) {
    const chat = requireChat(req.chat);
    const s = req.sampling;
    return {
      model: model ?? 'default',
      messages: chat.messages.map(toOpenAiMessage),
      ...(chat.tools.length > 0 ? { tools: chat.tools } : {}),
      max_tokens: req.maxTokens,
      temperature: s.temperature ?? 1,
      top_p: s.top_p ?? 1,
      ...(s.top_k !== undefined && s.top_k > 0 ? { top_k: s.top_k } : {}),
      ...(s.seed !== undefined ? { seed: s.seed } : {}),
      ...stopOf(s),
      ...(s.enable_thinking !== undefined ? { chat_template_kwargs: { enable_thinking: s.enable_thinking } } : {}),
      logprobs: true,
      return_token_ids: true,
      stream: false,
    };
  },
  parse(json, req) {
    const r = OpenAiChatResponseSchema.parse(json);
    const c = r.choices[0]!;
    const finishReason = c.finish_reason === 'length' ? 'length' : c.finish_reason === 'abort' ? 'abort' : 'stop';
    const served = c.logprobs?.content ?? null;
    const enginePromptIds = r.prompt_token_ids ?? undefined;
    if (c.token_ids) {
      // vLLM V1 (the server that returns token ids) gives raw logprobs by default.
      let logprobs: number[];
      let semantics: LogprobSemantics = 'raw';
      if (served) {
        logprobs = served.map((e, i) => finiteLogprob(e.logprob, i));
        checkAligned(c.token_ids, logprobs);
      } else {
        logprobs = new Array<number>(c.token_ids.length).fill(0);
        semantics = 'none';
      }
      return { outputIds: c.token_ids, logprobs, finishReason, tokenSource: 'engine', logprobSemantics: semantics, ...(enginePromptIds ? { enginePromptIds } : {}) };
    }
    const codec = requireChat(req.chat).codec;
    const outputIds = retokenize(codec, c.message, finishReason === 'length');
    let logprobs: number[];
    let semantics: LogprobSemantics = 'unknown';
    if (served && served.length === outputIds.length) {
      logprobs = served.map((e, i) => finiteLogprob(e.logprob, i));
    } else {
      logprobs = new Array<number>(outputIds.length).fill(0);
      semantics = 'none';
    }
    const out: ParsedGeneration = { outputIds, logprobs, finishReason, tokenSource: 'retokenized', logprobSemantics: semantics };
    if (enginePromptIds) out.enginePromptIds = enginePromptIds;
    return out;
  },
};

function requireChat(chat: ChatContext | undefined): ChatContext {
  if (!chat) throw new Error('the openai protocol needs the conversation (GenerateRequest.chat); this caller sent prompt ids only');
  return chat;
}

/** One message of ours in OpenAI's form: tool calls as `{id, type: 'function', function: {name, arguments: JSON string}}`. */
export function toOpenAiMessage(m: Message): Record<string, unknown> {
  if (m.role === 'assistant') {
    const out: Record<string, unknown> = { role: 'assistant', content: m.content };
    if (m.tool_calls && m.tool_calls.length > 0) {
      out.tool_calls = toOpenAiToolCalls(m.tool_calls, (i) => m.tool_calls![i]!.id ?? `call_${i}`);
    }
    return out;
  }
  if (m.role === 'tool') {
    const out: Record<string, unknown> = { role: 'tool', content: m.content, tool_call_id: m.tool_call_id ?? '' };
    if (m.name !== undefined) out.name = m.name;
    return out;
  }
  return { role: m.role, content: m.content };
}

/**
 * Tool calls in OpenAI's form, `{id, type: 'function', function: {name, arguments: JSON string}}`:
 * the one mapping both the client side (requests to a chat backend) and the server side (the
 * fake server's and the per-rollout proxy's answers) use. `idOf(i)` names the i-th call.
 */
export function toOpenAiToolCalls(calls: readonly ToolCall[], idOf: (i: number) => string): { id: string; type: 'function'; function: { name: string; arguments: string } }[] {
  return calls.map((c, i) => ({ id: idOf(i), type: 'function' as const, function: { name: c.name, arguments: JSON.stringify(c.arguments) } }));
}

/**
 * A tool call's `arguments` as OpenAI sends them (a JSON string, or an object some servers send
 * as is) when they are a JSON object; null otherwise (malformed JSON, an array, a scalar).
 */
export function toolArgumentsOf(raw: unknown): Record<string, unknown> | null {
  let args: unknown = raw;
  if (typeof raw === 'string') {
    try {
      args = JSON.parse(raw);
    } catch {
      return null;
    }
  }
  return args && typeof args === 'object' && !Array.isArray(args) ? (args as Record<string, unknown>) : null;
}

type ReplyMessage = z.infer<typeof OpenAiChatResponseSchema>['choices'][number]['message'];

/**
 * The ids the model would have sampled for this reply, rendered with the rollout's codec. A tool
 * call whose `arguments` is not a JSON object is written back in the codec's tool-call format
 * with its arguments as sent (a raw `<tool_call>` block where the codec has no writer), so the
 * codec's parser reports it as the policy's malformed call instead of it vanishing.
 */
export function retokenize(codec: ChatCodec, msg: ReplyMessage, cutByLength: boolean): number[] {
  let content = msg.content ?? '';
  // Harmony (gpt-oss) keeps reasoning in its own channel; the other families in a <think> block.
  const apart = reasoningApart(codec);
  if (msg.reasoning_content && !apart) content = `<think>\n${msg.reasoning_content}\n</think>\n\n${content}`;
  const calls: { name: string; arguments: Record<string, unknown> }[] = [];
  const written: WrittenCall[] = [];
  let rawBlocks = '';
  for (const tc of msg.tool_calls ?? []) {
    const raw = tc.function.arguments ?? '{}';
    const args = toolArgumentsOf(raw);
    const text = typeof raw === 'string' ? raw : JSON.stringify(raw);
    if (args) calls.push({ name: tc.function.name, arguments: args });
    else rawBlocks += `${content || rawBlocks ? '\n' : ''}<tool_call>\n{"name": ${JSON.stringify(tc.function.name)}, "arguments": ${text}}\n</tool_call>`;
    written.push({ name: tc.function.name, arguments: args ?? text });
  }
  // The end-of-turn token of the codec (HfChatCodec and harmony's carry it).
  const eot = (codec as { endOfTurnId?: number }).endOfTurnId;
  const write = TOOL_PARSERS[(codec as { format?: { toolParser?: string } }).format?.toolParser ?? '']?.write;
  let ids: number[];
  if (written.length > calls.length && write && eot !== undefined) {
    // A malformed call has no object to render through the template: the whole turn in the format the parser reads.
    ids = [...codec.encode(write(content, written)), eot];
  } else {
    ids = codec.encodeAssistant({ content: content + rawBlocks, ...(apart && msg.reasoning_content ? { reasoning: msg.reasoning_content } : {}), ...(calls.length > 0 ? { tool_calls: calls } : {}) });
  }
  // A turn cut by max_tokens never sampled its end-of-turn token; the continuation closes it.
  // (A copy: a codec may hand out a cached array.)
  if (cutByLength && eot !== undefined && ids.at(-1) === eot) return ids.slice(0, -1);
  return ids;
}
