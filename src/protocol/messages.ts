import { z } from 'zod';

/** One tool call of an assistant turn: the ProRL / OpenHands form `{name, arguments}`. */
export const ToolCallSchema = z.object({
  /** Id linking the call to its `tool` message; the runtime assigns one when the model gave none. */
  id: z.string().optional(),
  name: z.string().min(1),
  arguments: z.record(z.string(), z.unknown()),
});
export type ToolCall = z.infer<typeof ToolCallSchema>;

/**
 * One chat message. `token_ids` / `input_ids` / `logprobs` are filled in token mode on results:
 * for assistant turns `input_ids` is the whole prompt and `token_ids` the sampled ids; for other
 * messages `token_ids` are the templated ids the runtime appended.
 */
export const MessageSchema = z.object({
  role: z.enum(['system', 'user', 'assistant', 'tool']),
  content: z.string(),
  tool_calls: z.array(ToolCallSchema).optional(),
  tool_call_id: z.string().optional(),
  /** Tool name, on `tool` messages. */
  name: z.string().optional(),
  token_ids: z.array(z.number().int()).optional(),
  input_ids: z.array(z.number().int()).optional(),
  logprobs: z.array(z.number()).optional(),
});
export type Message = z.infer<typeof MessageSchema>;

/** A tool offered to the model, in the OpenAI function-tool form the chat templates expect. */
export const ToolSchemaSchema = z.object({
  type: z.literal('function'),
  function: z.object({
    name: z.string(),
    description: z.string(),
    parameters: z.record(z.string(), z.unknown()),
  }),
});
export type ToolSchema = z.infer<typeof ToolSchemaSchema>;

/** An assistant turn of `instance.oracle`, replayed by the scripted policy. */
export const OracleTurnSchema = z.object({
  content: z.string().optional(),
  tool_calls: z.array(z.object({ name: z.string(), arguments: z.record(z.string(), z.unknown()) })).optional(),
});
export type OracleTurn = z.infer<typeof OracleTurnSchema>;
