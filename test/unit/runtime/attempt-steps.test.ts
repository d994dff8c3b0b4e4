import { afterEach, describe, expect, it } from 'vitest';
import type { ActContext, AgentHandler } from '../../../src/index.js';
import { createTestHandler } from '../../../src/testing/index.js';
import { retained, rig, task, type Rig } from './helpers.js';

let r: Rig | undefined;
afterEach(async () => {
  await r?.rt.close();
  r = undefined;
});

describe('attempt steps', () => {
  it('reports tool events from hooks a handler destructured, each with its own turn', async () => {
    const base = createTestHandler();
    const kept: ActContext[] = [];
    const handler: AgentHandler = {
      ...base,
      act: async (ctx) => {
        kept.push(ctx);
        const { onToolCall, onToolResult, turn } = ctx;
        onToolCall?.({ callId: `c${turn}`, name: 'probe', arguments: {} });
        onToolResult?.({ callId: `c${turn}`, name: 'probe', content: 'ok' });
        return base.act(ctx);
      },
    };
    r = rig({ runtime: { events: { retain: 1000 }, handlers: [handler] } });
    const h = r.rt.submit(task());
    await r.clock.advance(1);
    expect((await h.result).outcome).toBe('completed');
    const probes = (await retained(r.rt, h.id)).filter((e) => (e.type === 'tool.call' || e.type === 'tool.result') && e.name === 'probe');
    expect(probes.map((e) => `${e.type}@${String(e.turn)}`)).toEqual(['tool.call@0', 'tool.result@0', 'tool.call@1', 'tool.result@1', 'tool.call@2', 'tool.result@2']);
    // Each turn's context is its own: one kept from an earlier turn still says that turn.
    expect(kept.map((c) => c.turn)).toEqual([0, 1, 2]);
  });
});
