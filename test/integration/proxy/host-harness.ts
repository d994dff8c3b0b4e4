import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AgentHandler, ExternalAgent, ExternalAgentEvent } from '../../../src/proxy/agent-contract.js';
import { LlmProxy } from '../../../src/proxy/llm-proxy.js';

const AGENT = join(import.meta.dirname, 'host-agent.py');

/** Every host harness started and not yet reaped, so a test can assert none is left. */
export const liveChildren = new Set<ChildProcess>();

/**
 * A test double of the sandbox harness: `host-agent.py <mode>` as a host child process (its own
 * process group) talking to a real {@link LlmProxy} over its Unix socket. Lets the runtime's
 * harness loop be tested before the sandbox plumbing exists, with the same ExternalAgent contract.
 */
class HostHarness implements ExternalAgent {
  private readonly exited: Promise<number | null>;
  private code: number | null | undefined = undefined;
  output = '';

  constructor(
    private readonly child: ChildProcess,
    private readonly proxy: LlmProxy,
    readonly limits: { maxLlmCalls?: number; maxTokensTotal?: number },
  ) {
    liveChildren.add(child);
    child.stdout!.on('data', (d: Buffer) => (this.output += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (this.output += d.toString()));
    this.exited = new Promise((r) =>
      child.on('close', (c) => {
        liveChildren.delete(child);
        this.code = c;
        r(c);
      }),
    );
  }

  get exitCode(): number | null | undefined {
    return this.code;
  }

  async next(signal: AbortSignal): Promise<ExternalAgentEvent> {
    if (this.code !== undefined) return { type: 'exit', exitCode: this.code };
    const local = new AbortController();
    const call = this.proxy.next(AbortSignal.any([signal, local.signal])).then((c): ExternalAgentEvent => ({ type: 'chat', call: c }));
    call.catch(() => {});
    try {
      return await Promise.race([call, this.exited.then((c): ExternalAgentEvent => ({ type: 'exit', exitCode: c }))]);
    } finally {
      local.abort();
    }
  }

  async stop(reason: string): Promise<void> {
    this.proxy.end(reason);
    if (this.code === undefined) {
      try {
        process.kill(-this.child.pid!, 'SIGKILL');
      } catch {
        // gone
      }
      await this.exited;
    }
  }
}

/** Cleanups of ended attempts still running (their agent's stop, the proxy, the temp dir). */
const cleanups = new Set<Promise<void>>();

/** Resolves once every ended attempt's cleanup has finished: await it after closing the runtime, so no temp dir outlives the test file. */
export async function hostHarnessesCleaned(): Promise<void> {
  while (cleanups.size > 0) await Promise.allSettled([...cleanups]);
}

/**
 * A handler of family `host-harness` running `host-agent.py <instance.mode>` on the host; the
 * eval reads `harness_exit_code` into the details and rewards an exit 0.
 */
export function hostHarnessHandler(): AgentHandler {
  return {
    name: 'host-harness',
    async init(ctx) {
      const dir = await mkdtemp(join(tmpdir(), 'host-harness-'));
      const proxy = await LlmProxy.listen({ socketPath: join(dir, 'llm.sock'), token: `rk-${randomBytes(8).toString('hex')}` });
      const token = (proxy as unknown as { token: Buffer }).token.toString();
      const child = spawn('python3', [AGENT, String(ctx.instance.mode)], { cwd: dir, detached: true, env: { ...process.env, PROXY_SOCK: proxy.socketPath, OPENAI_API_KEY: token }, stdio: ['ignore', 'pipe', 'pipe'] });
      const inst = ctx.instance as { max_llm_calls?: number; max_tokens_total?: number };
      const agent = new HostHarness(child, proxy, { ...(inst.max_llm_calls ? { maxLlmCalls: inst.max_llm_calls } : {}), ...(inst.max_tokens_total ? { maxTokensTotal: inst.max_tokens_total } : {}) });
      // Each step whatever the one before did: a stop that throws must not leave the temp dir behind.
      const cleanup = async (): Promise<void> => {
        await agent.stop('ended').catch(() => undefined);
        await proxy.close().catch(() => undefined);
        await rm(dir, { recursive: true, force: true });
      };
      ctx.signal.addEventListener('abort', () => {
        const p = cleanup().finally(() => cleanups.delete(p));
        cleanups.add(p);
      }, { once: true });
      return { messages: [], tools: [], external: agent, state: { agent, proxy } };
    },
    act: () => Promise.reject(new Error('not called')),
    async eval(ctx) {
      const { agent, proxy } = ctx.state as { agent: HostHarness; proxy: LlmProxy };
      await agent.stop('evaluating');
      return { reward: agent.exitCode === 0 ? 1 : 0, resolved: agent.exitCode === 0, details: { harness_exit_code: agent.exitCode ?? null, output: agent.output, proxy_ended: proxy.hasEnded, statuses: Object.fromEntries(proxy.stats.byStatus) } };
    },
  };
}
