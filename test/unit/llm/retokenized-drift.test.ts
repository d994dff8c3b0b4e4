import { describe, expect, it } from 'vitest';
import type { ChatCodec } from '../../../src/llm/chat-codec.js';
import { codecFor } from '../../../src/llm/codec-registry.js';
import { TrajectoryBuilder, type SampledTurn } from '../../../src/llm/trajectory-builder.js';
import type { Message } from '../../../src/protocol/messages.js';
import { FAMILIES } from '../../fixtures/model-families.js';

// Re-tokenized mode (an OpenAI server that returns no token ids, and no prompt ids either): the
// server renders each next prompt from the messages with its template. Where that render does
// not extend the trajectory's prompt + sampled ids, the trajectory must say so in
// diagnostics.drift — with or without `detectDrift` (#28: 10 of 24 such transitions went
// unreported).

const quiet = { onWarning: () => undefined };
const qwen = codecFor({}, quiet);
const llama = codecFor({ tokenizer: FAMILIES.llama3_1.dir }, quiet);
const first: Message[] = [{ role: 'user', content: 'List the files.' }];

const sampled = (ids: number[], over: Partial<SampledTurn> = {}): SampledTurn => ({ outputIds: ids, logprobs: ids.map(() => 0), backendId: 'b', weightVersion: null, finishReason: 'stop', latencyMs: 1, tokenSource: 'retokenized', logprobSemantics: 'none', ...over });

/** One transition: the first prompt, a turn of `ids` parsed back, then `next`; the builder's drift. */
function transition(codec: ChatCodec, ids: number[], next: Message[], over: Partial<SampledTurn> = {}, detectDrift = false) {
  const b = new TrajectoryBuilder({ codec, detectDrift });
  b.start(first, [], codec.encodePrompt(first, []));
  const p = codec.parseAssistant(ids);
  b.addTurn(sampled(ids, over), { role: 'assistant', content: p.content, tool_calls: p.toolCalls });
  b.addContinuation(next, codec.encodeContinuation(next, ids));
  const server = codec.encodePrompt(b.messageView as Message[], []);
  return { t: b.build(), server };
}

describe('drift after a re-tokenized turn (the server renders the next prompt itself)', () => {
  it('is reported where the server’s render drops what was sampled (Qwen3: the think block before a new user message)', () => {
    const ids = qwen.encodeAssistant({ content: '<think>\nI will list them.\n</think>\n\nHere they are.' });
    const { t, server } = transition(qwen, ids, [{ role: 'user', content: 'Thanks.' }]);
    expect(t.diagnostics.drift).toHaveLength(1);
    const d = t.diagnostics.drift[0]!;
    // The first position where the server's prompt leaves ours, expected = the server's id there.
    expect(d.turn).toBe(1);
    expect(t.tokens.slice(0, d.position)).toEqual(server.slice(0, d.position));
    expect(d.expected).toBe(server[d.position]);
    expect(d.actual).toBe(t.tokens[d.position]);
    expect(qwen.decode([d.actual!])).toBe('<think>');
  });

  it('is reported where the template rewrites the turn (Llama 3.1 drops the text of a turn with a call)', () => {
    const ids = llama.encodeAssistant({ content: 'Let me look.', tool_calls: [{ name: 'execute_bash', arguments: { command: 'ls' } }] });
    const { t, server } = transition(llama, ids, [{ role: 'tool', content: 'a.txt', name: 'execute_bash' }]);
    expect(t.diagnostics.drift).toHaveLength(1);
    const d = t.diagnostics.drift[0]!;
    expect(t.tokens.slice(0, d.position)).toEqual(server.slice(0, d.position));
    expect(d.expected).toBe(server[d.position]);
  });

  it('is not reported where the server’s render extends what was sampled (Qwen3, text and a call)', () => {
    const ids = qwen.encodeAssistant({ content: 'Looking.', tool_calls: [{ name: 'execute_bash', arguments: { command: 'ls' } }] });
    const { t, server } = transition(qwen, ids, [{ role: 'tool', content: 'a.txt', name: 'execute_bash' }]);
    expect(server).toEqual(t.tokens);
    expect(t.diagnostics.drift).toEqual([]);
  });

  it('is left to detectDrift for engine tokens (no server render to compare: the engine saw our ids)', () => {
    const ids = qwen.encodeAssistant({ content: '<think>\nI will list them.\n</think>\n\nHere they are.' });
    expect(transition(qwen, ids, [{ role: 'user', content: 'Thanks.' }], { tokenSource: 'engine' }).t.diagnostics.drift).toEqual([]);
  });

  it('is left to the server’s own prompt ids when it reports them (checked on the next turn)', () => {
    const ids = qwen.encodeAssistant({ content: '<think>\nI will list them.\n</think>\n\nHere they are.' });
    const enginePromptIds = qwen.encodePrompt(first, []);
    expect(transition(qwen, ids, [{ role: 'user', content: 'Thanks.' }], { enginePromptIds }).t.diagnostics.drift).toEqual([]);
  });

  it('is reported once with detectDrift on too', () => {
    const ids = qwen.encodeAssistant({ content: '<think>\nI will list them.\n</think>\n\nHere they are.' });
    expect(transition(qwen, ids, [{ role: 'user', content: 'Thanks.' }], {}, true).t.diagnostics.drift).toHaveLength(1);
  });
});
