import { describe, expect, it } from 'vitest';
import type { DialectRoute } from '../../../../src/proxy/dialects/dialect.js';
import { ResponsesDialect } from '../../../../src/proxy/dialects/responses.js';
import { captureResponse, completionOf, refusalOf, sseEvents } from './capture.js';

const route: DialectRoute = { dialect: 'responses', op: 'generate' };
const d = new ResponsesDialect();
const warnings: string[] = [];
const ctx = { warn: (m: string) => warnings.push(m) };
const read = (body: Record<string, unknown>) => d.read({ model: 'gpt-5-codex', ...body }, route, ctx);

describe('ResponsesDialect.read', () => {
  it('reads instructions and input items (messages, function_call, function_call_output, reasoning) into the runtime form', () => {
    warnings.length = 0;
    const r = read({
      instructions: 'You are Codex.',
      input: [
        { type: 'message', role: 'developer', content: [{ type: 'input_text', text: '<permissions>none</permissions>' }] },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'fix the bug' }, { type: 'input_text', text: '<env>x</env>' }] },
        { type: 'reasoning', id: 'rs_1', summary: [], encrypted_content: null },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Looking.' }] },
        { type: 'function_call', call_id: 'call_1', name: 'exec_command', arguments: '{"cmd":"ls"}' },
        { type: 'function_call', call_id: 'call_2', name: 'exec_command', arguments: '{"cmd":"pwd"}' },
        { type: 'function_call_output', call_id: 'call_1', output: 'a.txt' },
        { type: 'function_call_output', call_id: 'call_2', output: [{ type: 'input_text', text: '/w' }] },
        { role: 'user', content: 'go on' },
      ],
      tools: [
        { type: 'function', name: 'exec_command', description: 'run', parameters: { type: 'object' }, strict: false },
        { type: 'web_search' },
        { type: 'custom', name: 'apply_patch' },
      ],
      max_output_tokens: 4096,
      stream: true,
      reasoning: { effort: 'medium', summary: 'auto' },
      store: false,
      include: ['reasoning.encrypted_content'],
    });
    expect(r.messages).toEqual([
      { role: 'system', content: 'You are Codex.' },
      { role: 'system', content: '<permissions>none</permissions>' },
      { role: 'user', content: 'fix the bug\n<env>x</env>' },
      { role: 'assistant', content: 'Looking.', tool_calls: [{ id: 'call_1', name: 'exec_command', arguments: { cmd: 'ls' } }, { id: 'call_2', name: 'exec_command', arguments: { cmd: 'pwd' } }] },
      { role: 'tool', content: 'a.txt', tool_call_id: 'call_1' },
      { role: 'tool', content: '/w', tool_call_id: 'call_2' },
      { role: 'user', content: 'go on' },
    ]);
    expect(r.tools.map((t) => t.function.name)).toEqual(['exec_command']);
    expect([r.stream, r.maxTokens, r.model, r.body.reasoning_effort]).toEqual([true, 4096, 'gpt-5-codex', 'medium']);
    expect(warnings).toEqual(['responses: tools of type "web_search" are not served and were left out of the prompt', 'responses: tools of type "custom" are not served and were left out of the prompt']);
  });

  it('takes a plain string input as one user message', () => {
    expect(read({ input: 'hi' }).messages).toEqual([{ role: 'user', content: 'hi' }]);
  });

  it('refuses an image part, previous_response_id and bad arguments with 400s naming the field', () => {
    const img = refusalOf(() => read({ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'data:' }] }] }));
    expect([img.status, img.code, img.param]).toEqual([400, 'unsupported_feature', 'input.0.content.0.type']);
    expect(refusalOf(() => read({ input: 'hi', previous_response_id: 'resp_1' })).param).toBe('previous_response_id');
    expect(refusalOf(() => read({ input: [{ type: 'function_call', call_id: 'c', name: 'f', arguments: '[1]' }] })).param).toBe('input.0.arguments');
    expect(refusalOf(() => read({ input: [{ type: 'bogus' }] })).message).toMatch(/input\.0\.type: unknown input item type "bogus"/);
    expect(refusalOf(() => read({ input: 7 })).param).toBe('input');
  });
});

describe('ResponsesDialect.write', () => {
  const turn = { content: 'Running.', tool_calls: [{ name: 'exec_command', arguments: { cmd: 'ls' } }] };

  it('answers a completed response with a message item and a function_call item carrying the call id', () => {
    const { res, out } = captureResponse();
    d.write(res, completionOf(turn), read({ input: 'hi' }));
    const r = JSON.parse(out.text) as { status: string; model: string; output: Record<string, unknown>[]; usage: { input_tokens: number } };
    expect([r.status, r.model, r.usage.input_tokens]).toEqual(['completed', 'gpt-5-codex', 5]);
    expect(r.output.map((o) => o.type)).toEqual(['message', 'function_call']);
    expect(r.output[0]).toMatchObject({ role: 'assistant', content: [{ type: 'output_text', text: 'Running.' }] });
    expect(r.output[1]).toMatchObject({ call_id: 'chatcmpl-tool-1-0', name: 'exec_command', arguments: '{"cmd":"ls"}' });
  });

  it('marks a cut answer incomplete with max_output_tokens', () => {
    const { res, out } = captureResponse();
    d.write(res, completionOf({ content: 'cut' }, 'length'), read({ input: 'hi', stream: true }));
    const last = sseEvents(out.text).at(-1)!;
    expect(last.event).toBe('response.incomplete');
    expect(last.data).toMatchObject({ response: { status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } } });
  });

  it('streams the event sequence the SDK accumulates, numbered in order', () => {
    const { res, out } = captureResponse();
    d.write(res, completionOf(turn), read({ input: 'hi', stream: true }));
    const ev = sseEvents(out.text);
    expect(ev.map((e) => e.event)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(ev.map((e) => (e.data as { sequence_number: number }).sequence_number)).toEqual(ev.map((_, i) => i));
    expect(ev.at(-1)!.data).toMatchObject({ response: { status: 'completed', usage: { input_tokens: 5, output_tokens: expect.any(Number) } } });
  });
});

describe('ResponsesDialect over a growing history', () => {
  it('reuses the re-sent items and joins each turn\'s calls without touching the previous request\'s messages', () => {
    const dd = new ResponsesDialect();
    const items = [
      { role: 'user', content: 'task' },
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Looking.' }] },
      { type: 'function_call', call_id: 'c1', name: 'exec_command', arguments: '{"cmd":"ls"}' },
      { type: 'function_call_output', call_id: 'c1', output: 'a' },
    ];
    const first = dd.read({ input: items }, route, ctx);
    const second = dd.read({ input: [...(JSON.parse(JSON.stringify(items)) as unknown[]), { type: 'function_call', call_id: 'c2', name: 'exec_command', arguments: '{"cmd":"pwd"}' }, { type: 'function_call_output', call_id: 'c2', output: 'b' }] }, route, ctx);
    const third = dd.read({ input: [...(JSON.parse(JSON.stringify(items)) as unknown[]), { type: 'function_call', call_id: 'c2', name: 'exec_command', arguments: '{"cmd":"pwd"}' }, { type: 'function_call_output', call_id: 'c2', output: 'b' }] }, route, ctx);
    const expected = [
      { role: 'user', content: 'task' },
      { role: 'assistant', content: 'Looking.', tool_calls: [{ id: 'c1', name: 'exec_command', arguments: { cmd: 'ls' } }] },
      { role: 'tool', content: 'a', tool_call_id: 'c1' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'c2', name: 'exec_command', arguments: { cmd: 'pwd' } }] },
      { role: 'tool', content: 'b', tool_call_id: 'c2' },
    ];
    expect(first.messages).toEqual(expected.slice(0, 3));
    expect(second.messages).toEqual(expected);
    expect(third.messages).toEqual(expected);
    expect(second.messages[0]).toBe(first.messages[0]);
    expect(second.messages[2]).toBe(first.messages[2]);
    expect(first.messages[1]!.tool_calls).toHaveLength(1);
  });
});
