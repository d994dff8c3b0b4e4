import { describe, expect, it } from 'vitest';
import type { DialectRoute } from '../../../../src/proxy/dialects/dialect.js';
import { GoogleDialect } from '../../../../src/proxy/dialects/google.js';
import { ProxyRefusal } from '../../../../src/proxy/openai-error.js';
import { captureResponse, completionOf, refusalOf, sseEvents } from './capture.js';

const d = new GoogleDialect();
const ctx = { warn: () => undefined };
const plain: DialectRoute = { dialect: 'google', op: 'generate', model: 'gemini-2.5-pro', stream: false };
const sse: DialectRoute = { ...plain, stream: true, sse: true };

describe('GoogleDialect.read', () => {
  it('reads systemInstruction, contents with functionCall / functionResponse parts and function declarations', () => {
    const r = d.read(
      {
        systemInstruction: { role: 'user', parts: [{ text: 'You are Gemini CLI.' }] },
        contents: [
          { role: 'user', parts: [{ text: 'context' }, { text: 'fix it' }] },
          { role: 'model', parts: [{ text: 'thinking…', thought: true }, { text: 'Let me ' }, { text: 'look.' }, { functionCall: { name: 'run_shell_command', args: { command: 'ls' } }, thoughtSignature: 'sig' }, { functionCall: { id: 'c9', name: 'read_file', args: { path: 'a' } } }] },
          { role: 'user', parts: [{ functionResponse: { id: 'c9', name: 'read_file', response: { output: 'A' } } }, { functionResponse: { name: 'run_shell_command', response: { output: 'a.txt', exitCode: 0 } } }] },
        ],
        tools: [{ functionDeclarations: [{ name: 'run_shell_command', description: 'run', parametersJsonSchema: { type: 'object' } }, { name: 'read_file', parameters: { type: 'OBJECT' } }] }],
        generationConfig: { maxOutputTokens: 2048, temperature: 0.5, thinkingConfig: { includeThoughts: true } },
      },
      plain,
      ctx,
    );
    expect(r.messages).toEqual([
      { role: 'system', content: 'You are Gemini CLI.' },
      { role: 'user', content: 'context\nfix it' },
      { role: 'assistant', content: 'Let me look.', tool_calls: [{ id: 'run_shell_command-1-0', name: 'run_shell_command', arguments: { command: 'ls' } }, { id: 'c9', name: 'read_file', arguments: { path: 'a' } }] },
      { role: 'tool', content: 'A', tool_call_id: 'c9', name: 'read_file' },
      { role: 'tool', content: '{"output":"a.txt","exitCode":0}', tool_call_id: 'run_shell_command-1-0', name: 'run_shell_command' },
    ]);
    expect(r.tools.map((t) => [t.function.name, t.function.parameters])).toEqual([['run_shell_command', { type: 'object' }], ['read_file', { type: 'OBJECT' }]]);
    expect([r.maxTokens, r.model, r.enableThinking, r.stream]).toEqual([2048, 'gemini-2.5-pro', true, false]);
    expect(d.read({ contents: [{ parts: [{ text: 'x' }] }], generationConfig: { thinkingConfig: { thinkingBudget: 0 } } }, sse, ctx)).toMatchObject({ enableThinking: false, stream: true });
  });

  it('refuses inline data and server-side tools with 400s naming them, and a second candidate', () => {
    const img = refusalOf(() => d.read({ contents: [{ role: 'user', parts: [{ inlineData: { mimeType: 'image/png', data: 'AA' } }] }] }, plain, ctx));
    expect([img.status, img.code, img.param]).toEqual([400, 'unsupported_feature', 'contents.0.parts.0.inlineData']);
    const search = refusalOf(() => d.read({ contents: [{ parts: [{ text: 'x' }] }], tools: [{ googleSearch: {} }] }, plain, ctx));
    expect([search.param, search.message]).toEqual(['tools.0.googleSearch', 'tools.0.googleSearch: the server-side tool googleSearch is not served by this endpoint (text and function tools only)']);
    expect(refusalOf(() => d.read({ contents: [{ parts: [{ text: 'x' }] }], generationConfig: { candidateCount: 2 } }, plain, ctx)).param).toBe('generationConfig.candidateCount');
    expect(refusalOf(() => d.read({ contents: [] }, plain, ctx)).param).toBe('contents');
  });
});

describe('GoogleDialect.write', () => {
  const turn = { content: 'Running.', tool_calls: [{ name: 'run_shell_command', arguments: { command: 'ls' } }] };
  const req = (route: DialectRoute) => d.read({ contents: [{ role: 'user', parts: [{ text: 'hi' }] }] }, route, ctx);

  it('answers one candidate with text and functionCall parts, the path\'s model and usage', () => {
    const { res, out } = captureResponse();
    d.write(res, completionOf(turn), req(plain));
    expect(JSON.parse(out.text)).toMatchObject({
      candidates: [{ content: { role: 'model', parts: [{ text: 'Running.' }, { functionCall: { id: 'chatcmpl-tool-1-0', name: 'run_shell_command', args: { command: 'ls' } } }] }, finishReason: 'STOP', index: 0 }],
      usageMetadata: { promptTokenCount: 5 },
      modelVersion: 'gemini-2.5-pro',
    });
  });

  it('streams it as server-sent events with ?alt=sse, else as a JSON array; MAX_TOKENS when cut', () => {
    const a = captureResponse();
    d.write(a.res, completionOf({ content: 'cut' }, 'length'), req(sse));
    expect(a.out.headers['content-type']).toBe('text/event-stream');
    const ev = sseEvents(a.out.text.replaceAll('\r\n', '\n'));
    expect(ev).toHaveLength(1);
    expect(ev[0]!.data).toMatchObject({ candidates: [{ finishReason: 'MAX_TOKENS', content: { parts: [{ text: 'cut' }] } }] });
    const b = captureResponse();
    d.write(b.res, completionOf({ content: 'x' }), req({ ...plain, stream: true, sse: false }));
    expect(JSON.parse(b.out.text)).toHaveLength(1);
  });

  it('shapes errors as Google does', () => {
    expect(d.errorBody(new ProxyRefusal({ status: 403, type: 'invalid_request_error', code: 'wrong_rollout_key', message: 'no' }))).toEqual({ error: { code: 403, message: 'no', status: 'PERMISSION_DENIED' } });
  });
});

describe('GoogleDialect over a growing history', () => {
  it('hands the re-sent contents back as the same objects, reads only the new ones, and links a new nameless functionResponse to a call read before', () => {
    const dd = new GoogleDialect();
    const c0 = { role: 'user', parts: [{ text: 'task' }] };
    const c1 = { role: 'model', parts: [{ functionCall: { name: 'run_shell_command', args: { command: 'ls' } } }, { functionCall: { name: 'read_file', args: { path: 'a' } } }] };
    const c2 = { role: 'user', parts: [{ functionResponse: { name: 'read_file', response: { output: 'A' } } }] };
    const first = dd.read({ contents: [c0, c1, c2] }, plain, ctx);
    // Re-sent as fresh JSON, plus the other call's answer, which the earliest open call of its name takes.
    const again = JSON.parse(JSON.stringify([c0, c1, c2])) as unknown[];
    const c3 = { role: 'user', parts: [{ functionResponse: { name: 'run_shell_command', response: { output: 'a.txt' } } }] };
    const second = dd.read({ contents: [...again, c3] }, plain, ctx);
    const fresh = new GoogleDialect().read({ contents: [c0, c1, c2, c3] }, plain, ctx);
    expect(second.messages).toEqual(fresh.messages);
    for (let i = 0; i < first.messages.length; i++) expect(second.messages[i]).toBe(first.messages[i]);
    expect(second.messages.at(-1)).toEqual({ role: 'tool', content: 'a.txt', tool_call_id: 'run_shell_command-1-0', name: 'run_shell_command' });
    // A changed content is read again, and a bad new one is still named by its index.
    const third = dd.read({ contents: [c0, { role: 'model', parts: [{ text: 'edited' }] }] }, plain, ctx);
    expect(third.messages[1]).toEqual({ role: 'assistant', content: 'edited' });
    expect(refusalOf(() => dd.read({ contents: [c0, { role: 'model', parts: [{ text: 'edited' }] }, { role: 'bogus', parts: [] }] }, plain, ctx)).param).toBe('contents.2.role');
  });
});
