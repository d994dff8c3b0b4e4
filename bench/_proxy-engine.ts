/**
 * The fake engine of the proxy benches (bench/proxy.ts, proxy-hops.ts, proxy-profile.ts): the
 * same 24-token answer every time (cut at `max_tokens`), each request's prompt recorded in `seen`
 * for the direct replay.
 */
import type { ChatCodec } from '../src/llm/chat-codec.js';
import type { Engine, EngineRequest } from '../src/llm/llm-http-server.js';

export function fixedAnswerEngine(codec: ChatCodec): { engine: Engine; seen: { promptIds: number[]; maxTokens: number }[] } {
  const answer = codec.encodeAssistant({ content: 'This is the fixed answer of the proxy benchmark, always the same length.' });
  const seen: { promptIds: number[]; maxTokens: number }[] = [];
  const engine: Engine = {
    decode: (ids) => codec.decode(ids),
    async generate(req: EngineRequest) {
      seen.push({ promptIds: [...req.promptIds], maxTokens: req.maxTokens });
      const ids = answer.slice(0, req.maxTokens);
      return { outputIds: ids, logprobs: ids.map(() => -0.1), finishReason: 'stop' };
    },
  };
  return { engine, seen };
}
