/**
 * Our patch of the Jinja interpreter (patches/@huggingface+jinja+*.patch, applied by `npm ci`
 * through patch-package; docs/llm.md explains it): it is applied, and every family's chat
 * template renders exactly as with the original library, errors included.
 */
import * as Jinja from '@huggingface/jinja';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { readModelDir } from '../../../src/llm/model-dir.js';
import { FAMILIES } from '../../fixtures/model-families.js';
import { loadPristineJinja } from '../../helpers/pristine-jinja.js';
import { missingTools, skipNote } from '../../helpers/system-tools.js';

// The original library is rebuilt with `git apply -R` (test/helpers/pristine-jinja.ts).
const noGit = missingTools('git');
let pristine: typeof Jinja;
beforeAll(async () => {
  if (!noGit) pristine = await loadPristineJinja();
});

const TOOLS = [{ type: 'function', function: { name: 'execute_bash', description: 'Run a command', parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] } } }];
const call = (args: unknown) => [{ id: 'c1', type: 'function', function: { name: 'execute_bash', arguments: args } }];

/** Conversations that take every template through its branches: tools, calls, reasoning, thinking off, no generation prompt, a role it refuses. */
const CASES: Record<string, Record<string, unknown>> = {
  first: { messages: [{ role: 'user', content: 'hi' }], add_generation_prompt: true },
  system: { messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello' }, { role: 'user', content: 'again' }], add_generation_prompt: true },
  'no generation prompt': { messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'ok' }], add_generation_prompt: false },
  reasoning: { messages: [{ role: 'user', content: 'q' }, { role: 'assistant', content: '<think>\nplan\n</think>\n\nanswer' }, { role: 'user', content: 'q2' }], add_generation_prompt: true, enable_thinking: false },
  'tool calls (object arguments)': {
    messages: [{ role: 'user', content: 'list' }, { role: 'assistant', content: '', tool_calls: call({ command: 'ls -la' }) }, { role: 'tool', content: 'a\nb', tool_call_id: 'c1' }, { role: 'tool', content: 'c', tool_call_id: 'c1' }],
    tools: TOOLS,
    add_generation_prompt: true,
  },
  'tool calls (text arguments)': {
    messages: [{ role: 'user', content: 'list' }, { role: 'assistant', content: null, tool_calls: call('{"command": "ls"}') }, { role: 'tool', content: 'a', tool_call_id: 'c1' }],
    tools: TOOLS,
    add_generation_prompt: true,
  },
  'a role the template refuses': { messages: [{ role: 'user', content: 'hi' }, { role: 'narrator', content: 'x' }], add_generation_prompt: true },
  'a long history': { messages: Array.from({ length: 120 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: `turn ${i} “ünïcode” \t ${'x'.repeat(i % 7)}` })), add_generation_prompt: true },
};

function outcome(T: typeof Jinja.Template, source: string, ctx: Record<string, unknown>): { text: string } | { error: string } {
  try {
    return { text: new T(source).render({ bos_token: '<s>', eos_token: '</s>', ...ctx }) };
  } catch (e) {
    return { error: (e as Error).message };
  }
}

describe.skipIf(noGit !== null)(`the patched Jinja interpreter${skipNote(noGit)}`, () => {
  it('is the one installed: looking up an unset variable no longer throws and catches inside resolve()', () => {
    for (const [lib, calls] of [[Jinja, 0], [pristine, 1]] as const) {
      const env = new lib.Environment();
      const resolve = vi.spyOn(lib.Environment.prototype, 'resolve');
      try {
        expect(env.lookupVariable('never_set').type).toBe('UndefinedValue');
        expect(resolve).toHaveBeenCalledTimes(calls);
      } finally {
        resolve.mockRestore();
      }
    }
  });

  it('keeps every value type and variable lookup as before', () => {
    const env = new Jinja.Environment();
    env.set('s', 'x');
    env.set('n', 3);
    env.set('o', { a: [1, 2.5, null, true] });
    expect(['s', 'n', 'o'].map((k) => env.lookupVariable(k).type)).toEqual(['StringValue', 'IntegerValue', 'ObjectValue']);
    const child = new Jinja.Environment(env);
    expect(child.lookupVariable('s').value).toBe('x');
    expect(new Jinja.Template('{{ x is defined }} {{ o.a | length }} {{ o.a[1] }} {{ o.b is undefined }}').render({ o: { a: [1, 2.5] } })).toBe('false 2 2.5 true');
  });

  for (const fam of Object.values(FAMILIES)) {
    it(`renders ${fam.name}'s chat template exactly as the original library does, errors included`, () => {
      const source = readModelDir(fam.dir).chatTemplate!;
      let rendered = 0;
      for (const [name, ctx] of Object.entries(CASES)) {
        const ours = outcome(Jinja.Template, source, ctx);
        expect(ours, name).toEqual(outcome(pristine.Template, source, ctx));
        if ('text' in ours) rendered++;
      }
      // Most cases render (a refused role or call shape may throw, the same way on both).
      expect(rendered).toBeGreaterThanOrEqual(5);
    });
  }
});
