import { describe, expect, it } from 'vitest';
import { ChatDialect } from '../../../../src/proxy/dialects/chat.js';
import type { DialectRoute } from '../../../../src/proxy/dialects/dialect.js';
import { captureResponse, completionOf, sseEvents } from './capture.js';

const route: DialectRoute = { dialect: 'chat', op: 'generate' };
const ctx = { warn: () => undefined };

describe('ChatDialect', () => {
  it('reads the thinking switch, the output cap and the requested model', () => {
    const r = new ChatDialect().read({ model: 'qwen3-coder', messages: [{ role: 'user', content: 'hi' }], max_completion_tokens: 99, chat_template_kwargs: { enable_thinking: false }, stream: true, stream_options: { include_usage: true } }, route, ctx);
    expect([r.model, r.maxTokens, r.enableThinking, r.stream, r.includeUsage]).toEqual(['qwen3-coder', 99, false, true, true]);
  });

  it('streams usage in a last chunk of its own with include_usage, usage null before it', () => {
    const d = new ChatDialect();
    const { res, out } = captureResponse();
    d.write(res, completionOf({ content: 'hello' }), d.read({ model: 'qwen3-coder', messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true } }, route, ctx));
    const ev = sseEvents(out.text);
    expect(ev.at(-1)!.data).toBe('[DONE]');
    const chunks = ev.slice(0, -1).map((e) => e.data as { model: string; choices: { finish_reason: string | null }[]; usage: unknown });
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { prompt_tokens: 5, completion_tokens: expect.any(Number) } });
    for (const c of chunks.slice(0, -1)) expect(c.usage).toBeNull();
    expect(chunks.at(-2)!.choices[0]!.finish_reason).toBe('stop');
    expect(new Set(chunks.map((c) => c.model))).toEqual(new Set(['qwen3-coder']));
  });

  it('keeps usage on the finish chunk without include_usage', () => {
    const d = new ChatDialect();
    const { res, out } = captureResponse();
    d.write(res, completionOf({ content: 'hello' }), d.read({ messages: [{ role: 'user', content: 'hi' }], stream: true }, route, ctx));
    const chunks = sseEvents(out.text).slice(0, -1).map((e) => e.data as { choices: { finish_reason: string | null }[]; usage?: unknown });
    expect(chunks.at(-1)).toMatchObject({ choices: [{ finish_reason: 'stop' }], usage: { prompt_tokens: 5 } });
    expect(chunks.slice(0, -1).every((c) => c.usage === undefined)).toBe(true);
  });
});

describe('ChatDialect content parts', () => {
  it('joins text parts and reads developer as system', () => {
    const r = new ChatDialect().read({ messages: [{ role: 'developer', content: 'rules' }, { role: 'system', content: [{ type: 'text', text: 'You are Qwen Code.', cache_control: { type: 'ephemeral' } }, { type: 'text', text: 'Be brief.' }] }, { role: 'user', content: 'hi' }] }, route, ctx);
    expect(r.messages).toEqual([{ role: 'system', content: 'rules' }, { role: 'system', content: 'You are Qwen Code.\nBe brief.' }, { role: 'user', content: 'hi' }]);
  });

  it('refuses an image part with a 400 naming it', () => {
    let err: unknown;
    try {
      new ChatDialect().read({ messages: [{ role: 'user', content: [{ type: 'text', text: 'see' }, { type: 'image_url', image_url: { url: 'data:' } }] }] }, route, ctx);
    } catch (e) {
      err = e;
    }
    expect(err).toMatchObject({ status: 400, code: 'unsupported_feature', param: 'messages.0.content.1.type' });
  });
});
