import type { Message } from '../protocol/messages.js';

type Calls = readonly { name: string; arguments: Record<string, unknown> }[];

/**
 * The sampled ids behind recently parsed assistant turns, keyed by the message they were parsed
 * into, so a drift check over messages that carry no `token_ids` still splices the exact sampled
 * ids. Bounded; the oldest entries go first.
 */
export class SampledTurns {
  private readonly byKey = new Map<string, number[]>();

  constructor(private readonly cap = 8192) {}

  /** Records that `ids` were parsed into this content and these calls. */
  remember(content: string, toolCalls: Calls, ids: number[]): void {
    const key = keyOf(content, toolCalls);
    this.byKey.delete(key);
    this.byKey.set(key, ids);
    if (this.byKey.size > this.cap) this.byKey.delete(this.byKey.keys().next().value!);
  }

  /** An assistant message's sampled ids: its own `token_ids`, else those last parsed into the same message. */
  idsOf(m: Message): number[] | undefined {
    return m.token_ids ?? this.byKey.get(keyOf(m.content, m.tool_calls ?? []));
  }
}

function keyOf(content: string, toolCalls: Calls): string {
  return toolCalls.length === 0 ? content : `${content}\u0000${JSON.stringify(toolCalls.map((c) => [c.name, c.arguments]))}`;
}
