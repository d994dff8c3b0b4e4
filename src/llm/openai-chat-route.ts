import { z } from 'zod';
import type { Message, ToolSchema } from '../protocol/messages.js';
import type { ChatCodec, ParsedAssistant } from './chat-codec.js';
import { reasoningApart } from './harmony-codec.js';
import { toOpenAiToolCalls, toolArgumentsOf } from './protocols/openai.js';

/** Options of the server side of OpenAI chat completions (see `startLlmHttpServer`). */
export interface OpenAiRouteOptions {
  /** Renders the messages into prompt ids and parses the sampled ids back into content and tool calls. */
  codec: ChatCodec;
  /**
   * `true` (default): answer vLLM's `return_token_ids` with `prompt_token_ids` and choice
   * `token_ids`. `false`: behave like a stock OpenAI endpoint — refuse a request that carries
   * `return_token_ids` (400 naming it) and never send ids, so the client must re-tokenize.
   */
  returnTokenIds?: boolean | undefined;
}

const ChatToolCallIn = z.object({
  id: z.string().optional(),
  type: z.literal('function').optional(),
  function: z.object({ name: z.string().min(1), arguments: z.union([z.string(), z.record(z.string(), z.unknown())]).optional() }),
});

const ChatMessageIn = z.object({
  role: z.enum(['system', 'user', 'assistant', 'tool']),
  content: z.string().nullable().optional(),
  tool_calls: z.array(ChatToolCallIn).nullable().optional(),
  tool_call_id: z.string().optional(),
  name: z.string().optional(),
});

/** The request fields the server reads; others are ignored as OpenAI-compatible servers do. */
export const OpenAiChatRequestSchema = z.object({
  model: z.string().optional(),
  messages: z.array(ChatMessageIn).min(1),
  tools: z
    .array(z.object({ type: z.literal('function'), function: z.object({ name: z.string(), description: z.string().optional(), parameters: z.record(z.string(), z.unknown()).optional() }) }))
    .optional(),
  max_tokens: z.number().int().positive().optional(),
  max_completion_tokens: z.number().int().positive().optional(),
  temperature: z.number().min(0).max(2).optional(),
  top_p: z.number().min(0).max(1).optional(),
  top_k: z.number().int().optional(),
  seed: z.number().int().optional(),
  stop: z.union([z.string(), z.array(z.string())]).optional(),
  /** Token id → added logit, as OpenAI takes it (keys are decimal strings). */
  logit_bias: z.record(z.string().regex(/^\d+$/), z.number().min(-100).max(100)).optional(),
  logprobs: z.boolean().optional(),
  return_token_ids: z.boolean().optional(),
  chat_template_kwargs: z.object({ enable_thinking: z.boolean().optional() }).passthrough().optional(),
  /** gpt-oss (harmony): `Reasoning:` in the system message, as vLLM reads it; other models ignore it. */
  reasoning_effort: z.enum(['low', 'medium', 'high']).optional(),
});
export type OpenAiChatRequest = z.infer<typeof OpenAiChatRequestSchema>;

/**
 * The conversation of a chat request in the runtime's message form (tool-call `arguments` parsed
 * from their JSON strings, `content: null` as `''`) and its tools with defaults filled in.
 * `indexBase` is the index of `body.messages[0]` in the request, for the error (the proxy
 * converts only the messages after a re-sent prefix it converted before).
 * @throws Error naming the message whose tool-call arguments are not a JSON object.
 */
export function chatMessagesOf(body: OpenAiChatRequest, indexBase = 0): { messages: Message[]; tools: ToolSchema[] } {
  const messages: Message[] = body.messages.map((m, i0) => {
    const i = i0 + indexBase;
    const out: Message = { role: m.role, content: m.content ?? '' };
    if (m.tool_calls && m.tool_calls.length > 0) {
      out.tool_calls = m.tool_calls.map((c, j) => {
        const args = toolArgumentsOf(c.function.arguments ?? {});
        if (!args) throw new Error(`messages[${i}].tool_calls[${j}].function.arguments is not a JSON object`);
        return { ...(c.id !== undefined ? { id: c.id } : {}), name: c.function.name, arguments: args };
      });
    }
    if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
    if (m.name !== undefined) out.name = m.name;
    return out;
  });
  const tools: ToolSchema[] = (body.tools ?? []).map((t) => ({ type: 'function', function: { name: t.function.name, description: t.function.description ?? '', parameters: t.function.parameters ?? {} } }));
  return { messages, tools };
}

/**
 * The prompt ids the codec renders for a chat request ({@link chatMessagesOf}), ending with the
 * assistant generation prompt — what a real server does with its own chat template.
 * @throws Error naming the message whose tool-call arguments are not a JSON object.
 */
export function renderChatPrompt(codec: ChatCodec, body: OpenAiChatRequest): number[] {
  const { messages, tools } = chatMessagesOf(body);
  const thinking = body.chat_template_kwargs?.enable_thinking;
  const c = body.reasoning_effort && codec.withReasoningEffort ? codec.withReasoningEffort(body.reasoning_effort) : codec;
  return c.encodePrompt(messages, tools, thinking === undefined ? undefined : { enableThinking: thinking });
}

/** The answer to a chat request: content and tool calls parsed from the sampled ids (or `ctx.parsed`, their parse). */
export function chatCompletion(
  codec: ChatCodec,
  body: OpenAiChatRequest,
  sample: { promptIds: number[]; outputIds: number[]; logprobs: number[]; finishReason: 'stop' | 'length' | 'abort' },
  ctx: { model: string; n: number; returnTokenIds: boolean; parsed?: ParsedAssistant | undefined },
): Record<string, unknown> {
  // A caller that parsed the ids already (the proxy's loop keeps the message) passes it: one decode per turn.
  const parsed = ctx.parsed ?? codec.parseAssistant(sample.outputIds);
  // Malformed blocks stay in the text, as a server's tool parser leaves what it cannot read.
  const content = parsed.malformed.length > 0 ? [parsed.content, ...parsed.malformed.map((m) => m.raw)].filter((x) => x).join('\n') : parsed.content;
  const message: Record<string, unknown> = { role: 'assistant', content: content === '' && parsed.toolCalls.length > 0 ? null : content };
  // Harmony (gpt-oss) reasoning is a channel of its own, not in the content: vLLM's field for it.
  if (parsed.reasoning !== undefined && reasoningApart(codec)) message.reasoning_content = parsed.reasoning;
  if (parsed.toolCalls.length > 0) {
    message.tool_calls = toOpenAiToolCalls(parsed.toolCalls, (i) => `chatcmpl-tool-${ctx.n}-${i}`);
  }
  const choice: Record<string, unknown> = {
    index: 0,
    message,
    finish_reason: sample.finishReason === 'stop' && parsed.toolCalls.length > 0 ? 'tool_calls' : sample.finishReason,
    logprobs: body.logprobs ? { content: sample.outputIds.map((id, i) => ({ token: codec.decode([id]), logprob: sample.logprobs[i], bytes: null, top_logprobs: [] })) } : null,
  };
  const out: Record<string, unknown> = {
    id: `chatcmpl-${ctx.n}`,
    object: 'chat.completion',
    created: 0,
    model: ctx.model,
    choices: [choice],
    usage: { prompt_tokens: sample.promptIds.length, completion_tokens: sample.outputIds.length, total_tokens: sample.promptIds.length + sample.outputIds.length },
  };
  if (ctx.returnTokenIds && body.return_token_ids) {
    choice.token_ids = sample.outputIds;
    out.prompt_token_ids = sample.promptIds;
  }
  return out;
}
