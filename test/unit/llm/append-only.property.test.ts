import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { findDrift } from '../../../src/llm/drift-detector.js';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import type { Message } from '../../../src/protocol/messages.js';

const codec = createQwen3Codec();
const IM_END = codec.endOfTurnId;
const text = fc.string({ unit: fc.constantFrom('a', 'b', ' ', '\n', 'é', '1', '{', '"', '<', '>', '世'), maxLength: 24 });
const turn = fc.record({
  // Sampled ids: arbitrary ordinary tokens (not the canonical tokenization of anything).
  output: fc.array(fc.integer({ min: 0, max: 151642 }), { minLength: 0, maxLength: 8 }),
  closed: fc.boolean(),
  replies: fc.array(fc.record({ role: fc.constantFrom('user' as const, 'tool' as const), content: text }), { minLength: 1, maxLength: 3 }),
});

describe('append-only prompts (property)', () => {
  it('equal a full re-render for any sampled ids and any user / tool replies', () => {
    fc.assert(
      fc.property(text, fc.array(turn, { minLength: 1, maxLength: 4 }), (first, turns) => {
        const messages: Message[] = [{ role: 'user', content: first }];
        let ids = codec.encodePrompt(messages, []);
        for (const t of turns) {
          const output = t.closed ? [...t.output, IM_END] : t.output;
          const p = codec.parseAssistant(output);
          messages.push({ role: 'assistant', content: p.content, token_ids: output });
          messages.push(...t.replies);
          ids = [...ids, ...output, ...codec.encodeContinuation(t.replies, output)];
        }
        expect(findDrift(turns.length, codec.renderFull!(messages, []), ids)).toBeNull();
      }),
      { numRuns: 150, seed: 42 },
    );
  });
});
