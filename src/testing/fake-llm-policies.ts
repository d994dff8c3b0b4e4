import type { Instance } from '../protocol/instance.js';
import { xorshift32 } from '../rng.js';
import type { HfChatCodec } from '../llm/hf-codec.js';
import { EngineHttpError, type Engine, type EngineRequest, type EngineResult } from '../llm/llm-http-server.js';

export { xorshift32 } from '../rng.js';

/** FNV-1a over a string, for per-request seeds. */
export function hashString(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

function cut(ids: number[], logprobs: number[], maxTokens: number): EngineResult {
  if (ids.length <= maxTokens) return { outputIds: ids, logprobs, finishReason: 'stop' };
  return { outputIds: ids.slice(0, maxTokens), logprobs: logprobs.slice(0, maxTokens), finishReason: 'length' };
}

/**
 * Replays `instance.oracle[turn]` of the instance named by `x-rollout-instance-id`, at
 * `x-rollout-turn`, rendered with `codec.encodeAssistant` (so it ends with the end-of-turn
 * token), cut at `max_tokens`. Logprobs are fixed and plausible (−0.05 … −0.95, cycling).
 * Past the oracle's end it answers `Done.` (no tool call). An unknown instance is a 400.
 */
export function scriptedEngine(codec: HfChatCodec, tasks: ReadonlyMap<string, Instance>): Engine {
  const cache = new Map<string, number[]>();
  return {
    decode: (ids) => codec.decode(ids),
    async generate(req: EngineRequest): Promise<EngineResult> {
      if (req.instanceId === null) throw new EngineHttpError(400, 'the scripted policy needs the x-rollout-instance-id header');
      const inst = tasks.get(req.instanceId);
      if (!inst) throw new EngineHttpError(400, `unknown instance ${req.instanceId}`);
      const turn = req.turn ?? 0;
      const key = `${req.instanceId}\u0000${turn}`;
      let ids = cache.get(key);
      if (!ids) {
        ids = codec.encodeAssistant(inst.oracle?.[turn] ?? { content: 'Done.' });
        cache.set(key, ids);
      }
      return cut(ids, ids.map((_, i) => -0.05 - (i % 10) * 0.1), req.maxTokens);
    },
  };
}

/**
 * Samples random ordinary tokens (no special ones) with plausible logprobs (log of a uniform
 * in [0.05, 1)) and ends the turn with the end-of-turn token; a turn longer than `max_tokens`
 * is cut (`length`). The length is uniform in [1, `maxLength`]. Seeded per request from
 * (`seed`, instance id, turn, prompt length, request `seed`), so replies do not depend on
 * arrival order.
 */
export function randomEngine(codec: HfChatCodec, opts: { seed?: number; maxLength?: number } = {}): Engine {
  const seed = opts.seed ?? 0;
  const maxLength = opts.maxLength ?? 32;
  // Ordinary tokens are the ids below the first added token (151643 for Qwen3).
  const ordinary = Math.min(...codec.stopIds);
  return {
    decode: (ids) => codec.decode(ids),
    async generate(req: EngineRequest): Promise<EngineResult> {
      const rng = xorshift32(hashString(`${seed}|${req.instanceId}|${req.turn}|${req.promptIds.length}|${req.seed}`));
      const n = 1 + Math.floor(rng() * maxLength);
      const ids: number[] = [];
      const lps: number[] = [];
      for (let i = 0; i < n - 1; i++) {
        ids.push(Math.floor(rng() * ordinary));
        lps.push(Math.log(0.05 + rng() * 0.95));
      }
      ids.push(codec.endOfTurnId);
      lps.push(Math.log(0.05 + rng() * 0.95));
      return cut(ids, lps, req.maxTokens);
    },
  };
}
