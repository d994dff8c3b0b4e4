import type { Message, ToolCall, ToolSchema } from '../protocol/messages.js';

/** An assistant turn decoded from sampled ids. */
export interface ParsedAssistant {
  /** The text without tool-call blocks. */
  content: string;
  toolCalls: ToolCall[];
  /** Tool-call blocks that did not parse: the policy's own error, reported back to it. */
  malformed: { raw: string; error: string }[];
  /** The reasoning block's text (`<think>…</think>`), when the turn has one; also left in `content`. */
  reasoning?: string;
}

/**
 * Chat template + tokenizer, append-only. The runtime never re-tokenizes earlier turns: the
 * next prompt is previous prompt ids + sampled ids + {@link ChatCodec.encodeContinuation} of the
 * new messages. Implementations: Qwen3 (default), any Hugging Face tokenizer.json + Jinja
 * template, and the test codec in `src/testing/`.
 */
export interface ChatCodec {
  readonly name: string;
  /** Ids of the first prompt: the messages and tools, ending with the assistant generation prompt. */
  encodePrompt(messages: Message[], tools: ToolSchema[], opts?: { enableThinking?: boolean }): number[];
  /**
   * Ids to append after a sampled assistant turn for the new (tool / user) messages, ending with
   * the assistant generation prompt. `lastOutputIds` is what the model sampled, so a turn cut by
   * `max_tokens` before its end-of-turn token can be closed the way the template would.
   * `opts.enableThinking` must match the one given to {@link ChatCodec.encodePrompt}: templates
   * such as Qwen3's put an empty think block in the generation prompt when it is false.
   */
  encodeContinuation(newMessages: Message[], lastOutputIds: number[], opts?: { enableThinking?: boolean }): number[];
  /** Decodes sampled ids into text and tool calls. */
  parseAssistant(outputIds: number[]): ParsedAssistant;
  /**
   * Renders an assistant turn as the model would emit it, ending with its end-of-turn token
   * (scripted policies). `reasoning` is for formats that keep it apart from the content
   * (harmony's analysis channel); codecs whose reasoning is a block in the content ignore it.
   */
  encodeAssistant(turn: { content?: string | undefined; reasoning?: string | undefined; tool_calls?: { name: string; arguments: Record<string, unknown> }[] | undefined }): number[];
  /**
   * Ids that end a generation (the end-of-turn token, the config's EOS ids), when the codec knows
   * them: a token protocol whose answer carries no finish reason (ProRL's `/generate`) decides
   * `stop` vs `length` by whether the last sampled id is one of them.
   */
  readonly stopIds?: ReadonlySet<number> | undefined;
  /** Plain text → ids, no template. */
  encode(text: string): number[];
  decode(ids: number[]): string;
  /**
   * Optional drift check: the ids a full re-render of the conversation would give, ending with the
   * generation prompt. The runtime compares them with the incremental ids.
   */
  renderFull?(messages: Message[], tools: ToolSchema[], opts?: { enableThinking?: boolean }): number[];
  /**
   * The same model's codec with another reasoning effort in its prompts (harmony's
   * `Reasoning: low|medium|high`), same name; absent where the format has no such setting.
   */
  withReasoningEffort?(effort: 'low' | 'medium' | 'high'): ChatCodec;
}
