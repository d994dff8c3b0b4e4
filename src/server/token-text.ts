import type { ChatCodec } from '../llm/chat-codec.js';
import { codecFor } from '../llm/codec-registry.js';
import { HttpError } from './http-error.js';
import type { Route } from './router.js';
import type { ServiceContext } from './service-context.js';

/** A token id's decode that is not a whole character on its own (a byte of a UTF-8 sequence). */
const PARTIAL = '\uFFFD';
/** Tokens a split character may span at most (a 4-byte UTF-8 character, one byte per token). */
const MAX_SPAN = 4;

const caches = new WeakMap<object, Map<number, string>>();

/**
 * The text of each token of `ids`, aligned with it, as the visualizer's token view shows it.
 * Each id is decoded on its own (cached per codec: a 30k-token trajectory has a few thousand
 * distinct ids). A character split over several byte-level tokens decodes to U+FFFD piecewise;
 * there the whole run is decoded together and its text given to its first token (the others
 * get ''), so the texts joined are the trajectory's text. Pure apart from the cache.
 */
export function tokenTexts(codec: Pick<ChatCodec, 'decode'>, ids: readonly number[]): string[] {
  let cache = caches.get(codec);
  if (cache === undefined) {
    cache = new Map();
    caches.set(codec, cache);
  }
  const one = (id: number): string => {
    let t = cache.get(id);
    if (t === undefined) {
      t = codec.decode([id]);
      cache.set(id, t);
    }
    return t;
  };
  const out = new Array<string>(ids.length);
  for (let i = 0; i < ids.length; i++) {
    const t = one(ids[i]!);
    out[i] = t;
    if (!t.includes(PARTIAL)) continue;
    for (let j = i + 2; j <= Math.min(ids.length, i + MAX_SPAN); j++) {
      const joined = codec.decode(ids.slice(i, j));
      if (joined.includes(PARTIAL)) continue;
      out[i] = joined;
      for (let k = i + 1; k < j; k++) out[k] = '';
      i = j - 1;
      break;
    }
  }
  return out;
}

/**
 * `GET /v1/rollouts/:id/tokens`: the decoded text of each token of an ended rollout's
 * trajectory (`text`, aligned with `result.trajectory.tokens`), for the visualizer's token view.
 * Decoded with the codec the rollout was tokenized with: its job's own (`custom_tokenizer`), else
 * the runtime's (for `rollout view`, the run's `--tokenizer` as its summary.json records it). Where
 * that is not known (a run recorded before summary.json said it, a tokenizer directory since gone)
 * the default (Qwen3) is used and the answer says so with `assumed: true`. 404 for an unknown rollout, 409
 * while it has no result.
 */
export function tokenTextRoute(service: ServiceContext): Route {
  return {
    method: 'GET',
    path: '/v1/rollouts/:id/tokens',
    handler: async (r) => {
      const rt = service.runtime;
      if (!rt) throw new HttpError(503, 'STOPPED', 'the service is stopped; POST /start first');
      const id = r.params.id!;
      const s = rt.get(id) ?? (await rt.lookup?.(id));
      if (!s) throw new HttpError(404, 'NOT_FOUND', `no rollout ${id.slice(0, 200)}`);
      if (!s.result) throw new HttpError(409, 'NOT_ENDED', `rollout ${id.slice(0, 200)} has not ended: its tokens are known once it has a result`);
      const own = rt.codecOf?.(id) ?? (rt.codec?.decode === undefined ? undefined : (rt.codec as Pick<ChatCodec, 'name' | 'decode'>));
      const codec = own ?? codecFor({});
      return { status: 200, body: { id, codec: codec.name, assumed: own === undefined, text: tokenTexts(codec, s.result.trajectory.tokens) } };
    },
  };
}
