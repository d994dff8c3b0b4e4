import { describe, expect, it } from 'vitest';
import { continuationOf } from '../../../src/llm/drift-detector.js';
import { createQwen3Codec } from '../../../src/llm/qwen3-codec.js';
import type { Message } from '../../../src/protocol/messages.js';
import { SegmentedTrajectory } from '../../../src/proxy/segmented-trajectory.js';
import { TestCodec } from '../../../src/testing/test-codec.js';

const codec = new TestCodec();
const sys: Message = { role: 'system', content: 's' };
const user: Message = { role: 'user', content: 'task' };

/** Samples `reply` on the record as the loop would: the assistant message the agent then echoes. */
function sample(t: SegmentedTrajectory, reply: { content?: string; tool_calls?: { name: string; arguments: Record<string, unknown> }[] }): Message {
  const outputIds = codec.encodeAssistant(reply);
  const assistant: Message = { role: 'assistant', content: reply.content ?? '', tool_calls: (reply.tool_calls ?? []).map((c, i) => ({ ...c, id: `call-${i}` })) };
  t.addTurn({ outputIds, logprobs: outputIds.map(() => -0.25), backendId: 'b', weightVersion: 3, finishReason: 'stop', latencyMs: 1 }, assistant);
  return assistant;
}

describe('continuationOf', () => {
  it('says a prompt that starts with the previous tokens extends them', () => {
    expect(continuationOf(0, [1, 2, 3], [1, 2, 3, 4])).toEqual({ kind: 'extends' });
  });
  it('reports the first differing position of a rewrite', () => {
    expect(continuationOf(2, [1, 2, 3], [1, 9, 3, 4])).toEqual({ kind: 'rewrite', finding: { turn: 2, position: 1, expected: 9, actual: 2 } });
  });
  it('calls a shorter prompt a rewrite at its end', () => {
    expect(continuationOf(1, [1, 2, 3], [1, 2])).toEqual({ kind: 'rewrite', finding: { turn: 1, position: 2, expected: null, actual: 3 } });
  });
});

describe('SegmentedTrajectory', () => {
  it('appends a request that extends the last one by new messages, templating only them (mask 0)', () => {
    const t = new SegmentedTrajectory({ codec });
    expect(t.place([sys, user], [])).toEqual({ kind: 'first' });
    const first = [...t.promptIds];
    const a = sample(t, { tool_calls: [{ name: 'bash', arguments: { command: 'ls' } }] });
    const out = codec.encodeAssistant({ tool_calls: [{ name: 'bash', arguments: { command: 'ls' } }] });
    const obs: Message = { role: 'tool', content: 'a.txt', tool_call_id: 'call-0' };
    expect(t.place([sys, user, a, obs], [])).toEqual({ kind: 'extend', via: 'messages' });
    const cont = codec.encodeContinuation([obs], out);
    expect(t.promptIds).toEqual([...first, ...out, ...cont]);
    sample(t, { content: 'done' });
    const traj = t.build();
    expect(traj.segments).toBeUndefined();
    expect(traj.diagnostics.continuity).toBe('token-exact');
    expect(traj.lossMask.slice(first.length, first.length + out.length).every((m) => m === 1)).toBe(true);
    expect(traj.lossMask.slice(first.length + out.length, first.length + out.length + cont.length).every((m) => m === 0)).toBe(true);
    expect(traj.turns).toHaveLength(2);
  });

  it('treats the echoed assistant message with the agent\'s own tool-call ids as the same turn', () => {
    const t = new SegmentedTrajectory({ codec });
    t.place([sys, user], []);
    const a = sample(t, { tool_calls: [{ name: 'bash', arguments: { command: 'ls' } }] });
    const echoed: Message = { ...a, tool_calls: a.tool_calls!.map((c) => ({ ...c, id: 'agent-chose-this' })) };
    expect(t.place([sys, user, echoed, { role: 'tool', content: 'x', tool_call_id: 'agent-chose-this' }], []).kind).toBe('extend');
  });

  it('starts a new segment when history is rewritten and lists the segments explicitly', () => {
    const t = new SegmentedTrajectory({ codec });
    t.place([sys, user], []);
    const a = sample(t, { tool_calls: [{ name: 'bash', arguments: { command: 'ls' } }] });
    t.place([sys, user, a, { role: 'tool', content: 'out', tool_call_id: 'call-0' }], []);
    sample(t, { tool_calls: [{ name: 'bash', arguments: { command: 'pwd' } }] });
    const firstLen = t.totalTokens;
    const summary: Message = { role: 'user', content: 'Summary: listed files.' };
    const p = t.place([sys, summary], []);
    expect(p.kind).toBe('rewrite');
    const full = codec.encodePrompt([sys, summary], []);
    // The first position where the new render leaves the old record.
    let i = 0;
    while (full[i] === codec.encodePrompt([sys, user], [])[i]) i++;
    expect(p.kind === 'rewrite' && p.finding.position).toBe(i);
    expect(t.promptIds).toEqual(full);
    sample(t, { content: 'done' });
    const traj = t.build();
    expect(traj.segments).toEqual([
      { tokenStart: 0, tokenEnd: firstLen, turnStart: 0, turnEnd: 2, messageStart: 0, messageEnd: 5 },
      { tokenStart: firstLen, tokenEnd: traj.tokens.length, turnStart: 2, turnEnd: 3, messageStart: 5, messageEnd: 8 },
    ]);
    expect(traj.tokens.slice(firstLen, firstLen + full.length)).toEqual(full);
    expect(traj.diagnostics.continuity).toBe('segmented');
    expect(traj.diagnostics.rewrites).toHaveLength(1);
    expect(traj.lossMask.length).toBe(traj.tokens.length);
    expect(traj.weightVersions).toEqual([{ version: 3, tokens: traj.lossMask.filter((m) => m === 1).length }]);
    expect([traj.minWeightVersion, traj.maxWeightVersion]).toEqual([3, 3]);
  });

  it('starts a new segment when the tools change', () => {
    const t = new SegmentedTrajectory({ codec });
    t.place([sys, user], []);
    const a = sample(t, { content: 'hi' });
    const tool = { type: 'function' as const, function: { name: 'bash', description: '', parameters: {} } };
    expect(t.place([sys, user, a, { role: 'user', content: 'more' }], [tool]).kind).toBe('rewrite');
  });

  it('builds an empty token-exact trajectory when the agent never called the model', () => {
    const traj = new SegmentedTrajectory({ codec }).build();
    expect([traj.tokens.length, traj.turns.length, traj.diagnostics.continuity]).toEqual([0, 0, 'token-exact']);
  });
});

describe('SegmentedTrajectory across sub-agent calls', () => {
  it('resumes the main sequence after a sub-agent\'s calls and reports calls merged per sequence', () => {
    const t = new SegmentedTrajectory({ codec });
    t.place([sys, user], []);
    const a = sample(t, { tool_calls: [{ name: 'bash', arguments: { command: 'ls' } }] });
    const mainLen = t.totalTokens;
    // A sub-agent's own conversation: a segment of its own.
    const sub: Message = { role: 'user', content: 'sub-task: summarise a.txt' };
    expect(t.place([sys, sub], []).kind).toBe('rewrite');
    const s1 = sample(t, { content: 'It says x.' });
    // The main agent again, with the sub-agent's answer as its tool result: its own sequence, resumed.
    const obs: Message = { role: 'tool', content: 'It says x.', tool_call_id: 'call-0' };
    expect(t.place([sys, user, a, obs], [])).toEqual({ kind: 'extend', via: 'messages', resumed: true });
    expect(t.promptIds.slice(0, mainLen)).toEqual(codec.encodePrompt([sys, user], []).concat(codec.encodeAssistant({ tool_calls: [{ name: 'bash', arguments: { command: 'ls' } }] })));
    sample(t, { content: 'done' });
    // The sub-agent continues too.
    expect(t.place([sys, sub, s1, { role: 'user', content: 'shorter' }], []).kind).toBe('extend');
    sample(t, { content: 'x.' });
    const traj = t.build();
    expect(traj.diagnostics.merge).toEqual({ calls: 4, sequences: 2, callsPerSequence: [2, 2] });
    expect(traj.segments).toHaveLength(2);
    expect(traj.turns).toHaveLength(4);
    // Every sampled token is in the record with mask 1, the rest 0.
    expect(traj.lossMask.filter((m) => m === 1)).toHaveLength(traj.turns.reduce((n, x) => n + x.outputIds.length, 0));
  });

  it('reports one sequence for calls that all merged', () => {
    const t = new SegmentedTrajectory({ codec });
    t.place([sys, user], []);
    const a = sample(t, { content: 'hi' });
    t.place([sys, user, a, { role: 'user', content: 'more' }], []);
    sample(t, { content: 'ok' });
    expect(t.build().diagnostics.merge).toEqual({ calls: 2, sequences: 1, callsPerSequence: [2] });
  });

  it('renders with the request\'s thinking switch when the rollout sets none, and the rollout\'s when it does', () => {
    const qwen = createQwen3Codec();
    const off = qwen.encodePrompt([sys, user], [], { enableThinking: false });
    const on = qwen.encodePrompt([sys, user], [], { enableThinking: true });
    expect(off).not.toEqual(on);
    const free = new SegmentedTrajectory({ codec: qwen });
    free.place([sys, user], [], false);
    expect([...free.promptIds]).toEqual(off);
    const fixed = new SegmentedTrajectory({ codec: qwen, enableThinking: true });
    fixed.place([sys, user], [], false);
    expect([...fixed.promptIds]).toEqual(on);
  });
});
