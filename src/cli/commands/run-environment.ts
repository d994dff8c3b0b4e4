import { ValidationError } from '../../errors.js';
import { parseBackendAddress } from '../../llm/backend-address.js';
import { BackendPool } from '../../llm/backend-pool.js';
import type { LlmClient } from '../../llm/llm-client.js';
import { createQwen3Codec } from '../../llm/qwen3-codec.js';
import { createRuntime } from '../../runtime/runtime.js';
import type { Runtime } from '../../runtime/runtime-api.js';
import { createSandboxProvider, detectDriver } from '../../sandbox/index.js';
import type { SandboxProvider } from '../../sandbox/sandbox.js';
import { ScriptedPolicy } from '../../testing/scripted-policy.js';

/** What `rollout run` runs on: the runtime and the parts it owns, with one close path. */
export interface RunEnvironment {
  runtime: Runtime;
  /** For the log: which policy and which sandbox driver. */
  description: string;
  /** Closes the runtime (cancelling what is live), then the sandboxes and the LLM client. Never throws. */
  close(): Promise<void>;
}

/**
 * Builds the embedded runtime for `rollout run`: the scripted policy when no backend (or only
 * `scripted`) is given — and says so through `log` — else a backend pool over the parsed
 * addresses; a sandbox provider with the requested driver; the Qwen3 codec. Throws
 * ValidationError for a bad address or a mix of `scripted` and real backends.
 */
export async function openRunEnvironment(
  opts: { backends: string[]; concurrency: number; sandbox: 'bwrap' | 'unshare' | 'none' | 'auto'; timeoutS?: number | undefined },
  log: (line: string) => void,
): Promise<RunEnvironment> {
  const scripted = opts.backends.length === 0 || opts.backends.every((b) => b.trim() === 'scripted');
  if (!scripted && opts.backends.some((b) => b.trim() === 'scripted')) {
    throw new ValidationError("--backend scripted cannot be mixed with real backends", [{ path: 'backend', message: 'scripted and http mixed' }]);
  }
  const codec = createQwen3Codec();
  let llm: LlmClient;
  let description: string;
  if (scripted) {
    llm = new ScriptedPolicy({ codec });
    description = 'scripted policy';
    log("no --backend given: using the in-process scripted policy, which replays each instance's `oracle` turns (not a model)");
  } else {
    const specs = opts.backends.map((a) => {
      // parseBackendAddress reads a scheme it does not know as a host name (`ftp://x` →
      // `http://ftp//x`); refuse it here so a typo is an error, not a dead backend.
      if (/^[a-z][\w+.-]*:\/\//i.test(a.trim()) && !/^((prorl|vllm|sglang)\+)?https?:\/\//i.test(a.trim())) {
        throw new ValidationError(`bad backend address '${a}': expected http://host:port, prorl+|vllm+|sglang+http://host:port, or scripted`, [
          { path: 'backend', message: 'unknown scheme' },
        ]);
      }
      return parseBackendAddress(a);
    });
    const pool = new BackendPool();
    for (const s of specs) pool.addBackend(s);
    llm = pool;
    description = `backends ${specs.map((s) => `${s.protocol}+${s.url}`).join(', ')}`;
  }
  let sandboxes: SandboxProvider;
  try {
    sandboxes = createSandboxProvider({ driver: opts.sandbox });
  } catch (err) {
    await llm.close?.();
    throw err;
  }
  const det = detectDriver(opts.sandbox);
  description += `, sandbox driver ${det.driver}`;
  if (det.unsafe) log(`sandbox driver 'none': ${det.reason === 'requested' ? 'requested' : det.reason}; commands run WITHOUT isolation`);
  const c = opts.concurrency;
  const runtime = await createRuntime({
    llm,
    sandboxes,
    codec,
    stages: { init: c, run: c, eval: c },
    ...(opts.timeoutS ? { budgetMs: opts.timeoutS * 1000 } : {}),
  });
  return {
    runtime,
    description,
    async close() {
      await runtime.close({ drain: false }).catch(() => undefined);
      await sandboxes.close().catch(() => undefined);
      await llm.close?.()?.catch(() => undefined);
    },
  };
}

