import { ValidationError } from '../errors.js';
import type { ChatCodec } from '../llm/chat-codec.js';
import { resolveTokenizerRef, type CodecSpec } from '../llm/codec-registry.js';
import type { SamplingParams } from '../protocol/instance.js';

const FIELD = 'sampling.custom_tokenizer';

/**
 * Each job's codec (#17): the runtime's, unless the job's `sampling_params.custom_tokenizer`
 * (the reference's per-job field) names another model. A directory must be a usable model
 * directory (a ValidationError on `sampling.custom_tokenizer` otherwise); a hub name is looked
 * up in the local Hugging Face cache. A hub name the cache lacks keeps the runtime's codec,
 * with one warning per name: clients of the reference send the policy's hub name there, and
 * the runtime's backends were checked against its own codec, so their ids stay consistent.
 * Its calls then go only to backends of that model (`GenerateRequest.model` = the codec's name).
 */
export function jobCodecResolver(runtimeCodec: ChatCodec, make: (spec: CodecSpec) => ChatCodec, warn: (message: string) => void = (m) => void process.stderr.write(`warning: ${m}\n`)): (sampling: SamplingParams) => ChatCodec {
  const model = modelCodec(runtimeCodec, make, warn);
  // `reasoning_effort` (gpt-oss): the same model's codec with that effort; other formats have none.
  return (sampling) => {
    const c = model(sampling);
    return sampling.reasoning_effort && c.withReasoningEffort ? c.withReasoningEffort(sampling.reasoning_effort) : c;
  };
}

function modelCodec(runtimeCodec: ChatCodec, make: (spec: CodecSpec) => ChatCodec, warn: (message: string) => void): (sampling: SamplingParams) => ChatCodec {
  const warned = new Set<string>();
  return (sampling) => {
    const ref = sampling.custom_tokenizer;
    if (ref === undefined || ref === '') return runtimeCodec;
    let dir: string;
    try {
      dir = resolveTokenizerRef(ref, FIELD);
    } catch (e) {
      // Only a hub name missing from the cache throws here; a path is checked when loaded below.
      if (!(e instanceof ValidationError)) throw e;
      if (!warned.has(ref)) {
        warned.add(ref);
        warn(`custom_tokenizer ${ref} is not in the local Hugging Face cache; its jobs use this runtime's tokenizer (${runtimeCodec.name})`);
      }
      return runtimeCodec;
    }
    try {
      return make({ tokenizer: dir });
    } catch (e) {
      const msg = (e as Error).message.replace(/^tokenizer: /, '');
      throw new ValidationError(`${FIELD}: ${msg}`, [{ path: FIELD, message: msg }]);
    }
  };
}
