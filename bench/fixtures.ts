/** Fixtures shared by the runtime benchmarks (not a benchmark itself: run-all skips it). */
import { createRuntime, type EmbeddedRuntime, type RuntimeOptionsInput } from '../src/index.js';
import type { Sandbox, SandboxProvider } from '../src/sandbox/sandbox.js';
import { createTestHandler, ScriptedPolicy, TestCodec } from '../src/testing/index.js';

/** The 3-turn rollout of the orchestration benchmarks: two tool calls, then finish. */
export const oracle = [
  { content: 'a', tool_calls: [{ name: 'execute_bash', arguments: { command: 'true' } }] },
  { content: 'b', tool_calls: [{ name: 'execute_bash', arguments: { command: 'true' } }] },
  { tool_calls: [{ name: 'finish', arguments: {} }] },
];

/** A sandbox whose every operation succeeds at once: the benchmarks measure orchestration, not tools. */
const noopSandbox = (id: number): Sandbox => ({
  id: `noop-${id}`,
  bash: async () => ({ output: '', exitCode: 0, cwd: '/workspace', timedOut: false, truncated: false }),
  python: async () => ({ output: '', error: null, timedOut: false }),
  editor: async () => ({ output: '', error: false }),
  readFile: async () => '',
  writeFile: async () => {},
  close: async () => {},
});
let sbCount = 0;
export const noopProvider: SandboxProvider = { create: async () => noopSandbox(++sbCount), close: async () => {} };

/**
 * Runs `total` calls of `start`, keeping `inFlight` of them in flight, and returns calls per
 * second.
 */
export async function keepInFlight(total: number, inFlight: number, start: () => Promise<unknown>): Promise<number> {
  let started = 0;
  const t0 = performance.now();
  await new Promise<void>((resolve) => {
    let done = 0;
    const next = (): void => {
      started++;
      void start().then(() => {
        done++;
        if (done === total) resolve();
        else if (started < total) next();
      });
    };
    for (let i = 0; i < Math.min(inFlight, total); i++) next();
  });
  return total / ((performance.now() - t0) / 1000);
}

/** The instance every orchestration run submits. */
export const benchTask = { data_source: 'scripted', oracle };

/**
 * The runtime under test: test codec, zero-latency scripted policy, no-op sandboxes, `inFlight`
 * INIT and RUN slots, no retained results.
 */
export function benchRuntime(inFlight: number, extra: Partial<RuntimeOptionsInput> = {}): EmbeddedRuntime {
  const codec = new TestCodec();
  return createRuntime({
    codec,
    llm: new ScriptedPolicy({ codec }),
    sandboxes: noopProvider,
    handlers: [createTestHandler()],
    stages: { init: inFlight, run: inFlight },
    retainResults: 0,
    ...extra,
  });
}
