import { describe, expect, it } from 'vitest';
import { AnthropicDialect } from '../../../../src/proxy/dialects/anthropic.js';
import type { Dialect, DialectRoute } from '../../../../src/proxy/dialects/dialect.js';
import { GoogleDialect } from '../../../../src/proxy/dialects/google.js';
import { ResponsesDialect } from '../../../../src/proxy/dialects/responses.js';

const ctx = { warn: () => undefined };
const cases: { name: string; make: () => Dialect; route: DialectRoute; body: (turn: string, tools: unknown) => Record<string, unknown>; tools: () => unknown; bad: unknown }[] = [
  {
    name: 'anthropic',
    make: () => new AnthropicDialect(),
    route: { dialect: 'anthropic', op: 'generate' },
    body: (t, tools) => ({ max_tokens: 64, messages: [{ role: 'user', content: t }], tools }),
    tools: () => [{ name: 'Bash', description: 'run', input_schema: { type: 'object', properties: { command: { type: 'string' } } } }],
    bad: [{ name: 7 }],
  },
  {
    name: 'responses',
    make: () => new ResponsesDialect(),
    route: { dialect: 'responses', op: 'generate' },
    body: (t, tools) => ({ input: [{ role: 'user', content: t }], tools }),
    tools: () => [{ type: 'function', name: 'exec_command', description: 'run', parameters: { type: 'object' } }, { type: 'web_search' }],
    bad: [{ type: 'function', name: 7 }],
  },
  {
    name: 'google',
    make: () => new GoogleDialect(),
    route: { dialect: 'google', op: 'generate', model: 'g', stream: true, sse: true },
    body: (t, tools) => ({ contents: [{ role: 'user', parts: [{ text: t }] }], tools }),
    tools: () => [{ functionDeclarations: [{ name: 'run_shell_command', description: 'run', parametersJsonSchema: { type: 'object' } }] }],
    bad: [{ functionDeclarations: [{ name: 7 }] }],
  },
];

describe.each(cases)('$name reader: tools handed back as the same object', ({ make, route, body, tools, bad }) => {
  it('are not read again (the same array, equal to a fresh read), and other tools are', () => {
    const d = make();
    const t = tools();
    const first = d.read(body('a', t), route, ctx);
    const again = d.read(body('b', t), route, ctx);
    expect(again.tools).toBe(first.tools);
    expect(again.tools).toEqual(make().read(body('b', tools()), route, ctx).tools);
    expect(() => d.read(body('c', bad), route, ctx)).toThrow(/tools\.0/);
    const fresh = d.read(body('d', tools()), route, ctx);
    expect(fresh.tools).not.toBe(first.tools);
    expect(fresh.tools).toEqual(first.tools);
  });
});
