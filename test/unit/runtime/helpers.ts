import { createRuntime, type AgentHandler, type EmbeddedRuntime, type RuntimeOptionsInput } from '../../../src/index.js';
import { sleep } from '../../../src/clock.js';
import { createTestHandler, ManualClock, MemorySandboxProvider, ScriptedPolicy, TestCodec, type MemorySandboxOptions, type ScriptedPolicyOptions } from '../../../src/testing/index.js';

/** A runtime on a manual clock with the in-memory fakes, and handles on each fake. */
export interface Rig {
  rt: EmbeddedRuntime;
  clock: ManualClock;
  sandboxes: MemorySandboxProvider;
  llm: ScriptedPolicy;
  codec: TestCodec;
}

export function rig(opts: {
  runtime?: Omit<RuntimeOptionsInput, 'clock' | 'llm' | 'sandboxes' | 'codec'>;
  llm?: Omit<ScriptedPolicyOptions, 'codec' | 'clock'>;
  sandbox?: Omit<MemorySandboxOptions, 'clock'>;
  /** Time the test handler's eval takes, on the clock. */
  evalMs?: number;
} = {}): Rig {
  const clock = new ManualClock();
  const codec = new TestCodec();
  const sandboxes = new MemorySandboxProvider({ clock, ...opts.sandbox });
  const llm = new ScriptedPolicy({ codec, clock, ...opts.llm });
  const base = createTestHandler();
  const handler: AgentHandler = opts.evalMs
    ? {
        ...base,
        eval: async (ctx) => {
          await sleep(clock, opts.evalMs!, ctx.signal);
          return base.eval(ctx);
        },
      }
    : base;
  const rt = createRuntime({ handlers: [handler], ...opts.runtime, clock, codec, llm, sandboxes });
  return { rt, clock, sandboxes, llm, codec };
}

/** A three-turn oracle: write a file, read it, finish. */
export const threeTurns = [
  { content: 'write', tool_calls: [{ name: 'execute_bash', arguments: { command: 'echo hi > a.txt' } }] },
  { content: 'read', tool_calls: [{ name: 'execute_bash', arguments: { command: 'cat a.txt' } }] },
  { tool_calls: [{ name: 'finish', arguments: { message: 'done' } }] },
];

export const task = (extra: Record<string, unknown> = {}) => ({ data_source: 'scripted', instance_id: 't1', oracle: threeTurns, ...extra });

/** Collects every event retained so far (needs `events.retain`). */
export async function retained(rt: EmbeddedRuntime, rolloutId?: string): Promise<{ type: string; [k: string]: unknown }[]> {
  const ac = new AbortController();
  const it = rt.events({ after: 0, rolloutId, signal: ac.signal })[Symbol.asyncIterator]();
  const out: { type: string; [k: string]: unknown }[] = [];
  for (;;) {
    const r = await Promise.race([it.next(), new Promise<null>((res) => setImmediate(() => res(null)))]);
    if (!r || r.done) break;
    out.push(r.value as never);
  }
  ac.abort();
  return out;
}

/** The states a rollout went through, from its retained events. */
export async function statesOf(rt: EmbeddedRuntime, id: string): Promise<string[]> {
  return (await retained(rt, id)).filter((e) => e.type === 'rollout.state').map((e) => e.state as string);
}
