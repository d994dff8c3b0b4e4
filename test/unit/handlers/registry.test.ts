import { describe, expect, it } from 'vitest';
import { HandlerRegistry } from '../../../src/handlers/registry.js';
import { TaskError } from '../../../src/errors.js';
import type { AgentHandler } from '../../../src/proxy/agent-contract.js';

const h = (name: string, aliases?: string[]): AgentHandler => ({
  name,
  ...(aliases ? { aliases } : {}),
  init: async () => ({ messages: [], tools: [] }),
  act: async () => ({ messages: [], observations: [], stop: null }),
  eval: async () => ({ reward: 0, resolved: false }),
});

describe('HandlerRegistry', () => {
  it('routes a data_source by name and by alias', () => {
    const math = h('math', ['deepscaler']);
    const reg = new HandlerRegistry([math, h('code')]);
    expect(reg.resolve('math')).toBe(math);
    expect(reg.resolve('deepscaler')).toBe(math);
  });

  it('throws a TaskError naming the unknown data_source and listing the known ones', () => {
    const reg = new HandlerRegistry([h('math', ['deepscaler']), h('code')]);
    let err: unknown;
    try {
      reg.resolve('swe');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TaskError);
    expect((err as TaskError).message).toBe("unknown data_source 'swe'; known: code, deepscaler, math");
    expect((err as TaskError).retryable).toBe(false);
  });

  it('lets a later handler override an earlier one of the same name', () => {
    const mine = h('math');
    const reg = new HandlerRegistry([h('math'), mine]);
    expect(reg.resolve('math')).toBe(mine);
  });
});
