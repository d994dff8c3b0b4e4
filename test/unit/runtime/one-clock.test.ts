import { afterEach, describe, expect, it } from 'vitest';
import type { AgentHandler, Clock } from '../../../src/index.js';
import { createRuntime } from '../../../src/index.js';
import { createTestHandler, ManualClock, MemorySandboxProvider, ScriptedPolicy, TestCodec } from '../../../src/testing/index.js';

let close: (() => Promise<void>) | undefined;
afterEach(async () => {
  await close?.();
  close = undefined;
});

describe('one clock', () => {
  it('hands the runtime clock to every handler hook and times tool calls with it', async () => {
    const clock = new ManualClock();
    const codec = new TestCodec();
    const base = createTestHandler();
    const seen: Clock[] = [];
    const handler: AgentHandler = {
      ...base,
      init: (ctx) => (seen.push(ctx.clock), base.init(ctx)),
      act: (ctx) => (seen.push(ctx.clock), base.act(ctx)),
      eval: (ctx) => (seen.push(ctx.clock), base.eval(ctx)),
    };
    const rt = createRuntime({ handlers: [handler], clock, codec, llm: new ScriptedPolicy({ codec, clock }), sandboxes: new MemorySandboxProvider({ clock }), events: { retain: 100 } });
    close = () => rt.close();
    const h = rt.submit({ data_source: 'scripted', oracle: [{ tool_calls: [{ name: 'execute_bash', arguments: { command: 'echo hi' } }] }, { tool_calls: [{ name: 'finish', arguments: {} }] }] });
    await clock.advance(1);
    const res = await h.result;
    expect(res.outcome).toBe('completed');
    expect(seen.length).toBe(4);
    expect(seen.every((c) => c === clock)).toBe(true);
    // No time passed on the clock inside the tool call, whatever the wall clock did.
    expect(res.trajectory.turns.length).toBe(2);
    expect(res.timing.wallMs).toBe(0);
  });
});
