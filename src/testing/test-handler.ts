import type { AgentHandler } from '../proxy/agent-contract.js';
import { defineToolAgent } from '../handlers/tool-agent.js';
import { toolSchemas } from '../handlers/tools.js';

/**
 * A small tool-agent handler for tests, benchmarks and examples (data_source `scripted`,
 * alias `test`). Instance fields it reads, all optional:
 * - `files`: `{ path: content }` written into the sandbox;
 * - `prompt`: the user message (default "Solve the task.");
 * - `no_sandbox`: true to run without a sandbox;
 * - `expect`: `{ path, content }`; reward 1 when that file has that content at the end.
 * Without `expect`, reward is 1 when the agent called `finish`.
 */
export function createTestHandler(opts: { name?: string; aliases?: string[] } = {}): AgentHandler {
  return defineToolAgent({
    name: opts.name ?? 'scripted',
    aliases: opts.aliases ?? ['test'],
    tools: toolSchemas(),
    async init(ctx) {
      const inst = ctx.instance as { files?: Record<string, string>; prompt?: string; no_sandbox?: boolean };
      const sandbox = inst.no_sandbox ? undefined : await ctx.createSandbox({ files: inst.files });
      return {
        messages: [
          { role: 'system', content: 'You are an agent. Use the tools.' },
          { role: 'user', content: inst.prompt ?? 'Solve the task.' },
        ],
        sandbox,
      };
    },
    async eval(ctx) {
      const expect = (ctx.instance as { expect?: { path: string; content: string } }).expect;
      if (expect && ctx.sandbox) {
        const got = await ctx.sandbox.readFile(expect.path).catch(() => null);
        const ok = got === expect.content;
        return { reward: ok ? 1 : 0, resolved: ok, details: { got } };
      }
      const ok = ctx.finish === 'finish_tool';
      return { reward: ok ? 1 : 0, resolved: ok, details: { finish: ctx.finish } };
    },
  });
}
