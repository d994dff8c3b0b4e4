import { ManualClock, systemClock } from '../../../src/clock.js';
import { afterEach, describe, expect, it } from 'vitest';
import type { ActContext } from '../../../src/proxy/agent-contract.js';
import { defineToolAgent, toolAgentAct } from '../../../src/handlers/tool-agent.js';
import { toolSchemas } from '../../../src/handlers/tools.js';
import type { ToolCall } from '../../../src/protocol/messages.js';
import { SandboxError } from '../../../src/errors.js';
import { MemorySandboxProvider, type MemorySandbox } from '../../../src/testing/index.js';

let provider: MemorySandboxProvider;
afterEach(async () => {
  await provider.close();
  expect(provider.live).toBe(0);
});

async function ctxWith(calls: ToolCall[], opts: { malformed?: { raw: string; error: string }[]; sandbox?: boolean } = {}) {
  provider ??= new MemorySandboxProvider();
  if (provider.closed) provider = new MemorySandboxProvider();
  const sandbox = opts.sandbox === false ? undefined : await provider.create({ files: { 'f.txt': 'one\ntwo\n' } }, { rolloutId: 'r' });
  const seen: string[] = [];
  const ctx: ActContext = {
    rolloutId: 'r',
    instance: { data_source: 'x' },
    sampling: {},
    signal: new AbortController().signal,
    clock: systemClock,
    createSandbox: () => Promise.reject(new Error('unused')),
    sandbox,
    state: undefined,
    turn: 0,
    assistant: { role: 'assistant', content: '', tool_calls: calls },
    malformed: opts.malformed ?? [],
    onToolCall: (c) => seen.push(`call:${c.name}`),
    onToolResult: (o) => seen.push(`result:${o.name}`),
  };
  return { ctx, sandbox: sandbox as MemorySandbox | undefined, seen };
}

const tools = toolSchemas();

describe('toolAgentAct', () => {
  it('runs a bash call and returns a tool message with the output and exit code', async () => {
    const { ctx, seen } = await ctxWith([{ name: 'execute_bash', arguments: { command: 'cat f.txt' } }]);
    const r = await toolAgentAct(ctx, tools);
    expect(r.stop).toBeNull();
    expect(r.messages).toEqual([{ role: 'tool', name: 'execute_bash', tool_call_id: 'call_0_0', content: 'one\ntwo\n\n[Command finished with exit code 0]' }]);
    expect(r.observations[0]).toMatchObject({ exitCode: 0, error: false });
    expect(seen).toEqual(['call:execute_bash', 'result:execute_bash']);
  });

  it('edits files with str_replace_editor', async () => {
    const { ctx, sandbox } = await ctxWith([{ name: 'str_replace_editor', arguments: { command: 'str_replace', path: 'f.txt', old_str: 'two', new_str: '2' } }]);
    await toolAgentAct(ctx, tools);
    expect(sandbox!.files.get('f.txt')).toBe('one\n2\n');
  });

  it('stops with finish_tool on finish and does not run the calls after it', async () => {
    const { ctx, sandbox } = await ctxWith([
      { name: 'finish', arguments: { message: 'ok' } },
      { name: 'execute_bash', arguments: { command: 'echo x' } },
    ]);
    const r = await toolAgentAct(ctx, tools);
    expect(r.stop).toBe('finish_tool');
    expect(sandbox!.history).toEqual([]);
  });

  it('stops with no_tool_call on a turn without tool calls', async () => {
    const { ctx } = await ctxWith([]);
    expect((await toolAgentAct(ctx, tools)).stop).toBe('no_tool_call');
  });

  it('reports malformed tool-call blocks back to the model as policy errors and goes on', async () => {
    const { ctx } = await ctxWith([], { malformed: [{ raw: '<tool_call>{oops</tool_call>', error: 'bad JSON' }] });
    const r = await toolAgentAct(ctx, tools);
    expect(r.stop).toBeNull();
    expect(r.observations[0]).toMatchObject({ error: true, policyError: true });
    expect(r.messages[0]!.content).toContain('bad JSON');
  });

  it('turns bad arguments into a policy-error observation instead of throwing', async () => {
    const { ctx } = await ctxWith([{ name: 'execute_bash', arguments: { cmd: 'ls' } }]);
    const r = await toolAgentAct(ctx, tools);
    expect(r.observations[0]).toMatchObject({ error: true, policyError: true });
    expect(r.messages[0]!.content).toMatch(/invalid arguments for execute_bash: command/);
  });

  it('records a think call and returns an empty observation without touching the sandbox (#10.3)', async () => {
    const { ctx } = await ctxWith([{ name: 'think', arguments: { thought: 'first list the files' } }], { sandbox: false });
    ctx.clock = new ManualClock();
    const r = await toolAgentAct(ctx, tools);
    expect(r.stop).toBeNull();
    // Its latency is the time it took (none on a clock that did not move), not the clock's reading.
    expect(r.observations[0]).toMatchObject({ name: 'think', content: '', latencyMs: 0 });
    expect(r.observations[0]!.error).toBeFalsy();
    expect(r.messages[0]).toMatchObject({ role: 'tool', name: 'think', content: '' });
    const bad = await ctxWith([{ name: 'think', arguments: {} }], { sandbox: false });
    expect((await toolAgentAct(bad.ctx, tools)).observations[0]).toMatchObject({ policyError: true });
  });

  it('refuses a tool that was not offered', async () => {
    const { ctx } = await ctxWith([{ name: 'execute_ipython_cell', arguments: { code: '1' } }]);
    const r = await toolAgentAct(ctx, toolSchemas(['execute_bash', 'finish']));
    expect(r.messages[0]!.content).toMatch(/unknown tool 'execute_ipython_cell'/);
    expect(r.observations[0]!.policyError).toBe(true);
  });

  it('reports a missing sandbox as a policy error', async () => {
    const { ctx } = await ctxWith([{ name: 'execute_bash', arguments: { command: 'ls' } }], { sandbox: false });
    const r = await toolAgentAct(ctx, tools);
    expect(r.observations[0]).toMatchObject({ error: true, policyError: true });
  });

  it('lets a sandbox fault propagate so the runtime can retry', async () => {
    const { ctx, sandbox } = await ctxWith([{ name: 'execute_bash', arguments: { command: 'ls' } }]);
    await sandbox!.close();
    await expect(toolAgentAct(ctx, tools)).rejects.toBeInstanceOf(SandboxError);
  });

  it('marks a non-zero exit as an error observation that is not a policy error', async () => {
    const { ctx } = await ctxWith([{ name: 'execute_bash', arguments: { command: 'false' } }]);
    const r = await toolAgentAct(ctx, tools);
    expect(r.observations[0]).toMatchObject({ error: true, exitCode: 1 });
    expect(r.observations[0]!.policyError).toBeUndefined();
  });
});

describe('defineToolAgent', () => {
  it('builds a handler from init and eval that offers the given tools and keeps user state', async () => {
    const handler = defineToolAgent({
      name: 't',
      aliases: ['t2'],
      tools: toolSchemas(['finish']),
      init: async () => ({ messages: [{ role: 'user', content: 'hi' }], state: { n: 1 } }),
      eval: async (ctx) => ({ reward: (ctx.state as { n: number }).n, resolved: true }),
    });
    expect(handler.aliases).toEqual(['t2']);
    const { ctx } = await ctxWith([{ name: 'execute_bash', arguments: { command: 'ls' } }]);
    const init = await handler.init(ctx);
    expect(init.tools.map((t) => t.function.name)).toEqual(['finish']);
    const act = await handler.act({ ...ctx, state: init.state });
    expect(act.messages[0]!.content).toMatch(/unknown tool/);
    const ev = await handler.eval({ ...ctx, state: act.state, messages: [], finish: 'finish_tool' });
    expect(ev.reward).toBe(1);
  });
});
