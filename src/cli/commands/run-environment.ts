import { isOracleAddress, ORACLE_ADDRESS } from '../../llm/oracle-backend.js';
import { createRuntime, type EmbeddedRuntime } from '../../runtime/runtime.js';
import { detectDriver } from '../../sandbox/index.js';

/** What `rollout run` runs on: the runtime and the parts it owns, with one close path. */
export interface RunEnvironment {
  runtime: EmbeddedRuntime;
  /** For the log: which policy and which sandbox driver. */
  description: string;
  /** Closes the runtime, cancelling what is live; it closes the sandboxes and LLM client it made. Never throws. */
  close(): Promise<void>;
}

/**
 * Builds the embedded runtime for `rollout run`: the oracle backend when no backend (or only
 * `oracle`) is given — and says so through `log` — else a backend pool over the
 * addresses; sandbox hosts with the requested driver; the Qwen3 codec (the runtime's
 * defaults). Throws ValidationError for a bad address or a mix of `oracle` and real backends.
 */
export async function openRunEnvironment(
  opts: { backends: string[]; concurrency: number; sandbox: 'bwrap' | 'unshare' | 'none' | 'auto'; timeoutS?: number | undefined; tokenizer?: string | undefined; toolParser?: string | undefined },
  log: (line: string) => void,
): Promise<RunEnvironment> {
  const oracle = opts.backends.length === 0 || opts.backends.every(isOracleAddress);
  const det = detectDriver(opts.sandbox);
  if (oracle) log("using the oracle backend, which replays each instance's `oracle` turns (not a model)");
  if (det.unsafe) log(`sandbox driver 'none': ${det.reason === 'requested' ? 'requested' : det.reason}; commands run WITHOUT isolation`);
  const c = opts.concurrency;
  // The runtime makes and owns the codec, the backend pool (or oracle backend) and the
  // sandbox hosts (src/runtime/defaults.ts); a bad address is its ValidationError.
  const runtime = createRuntime({
    backends: oracle ? [ORACLE_ADDRESS] : opts.backends,
    sandboxDriver: opts.sandbox,
    stages: { init: c, run: c, eval: c },
    ...(opts.timeoutS ? { budgetMs: opts.timeoutS * 1000 } : {}),
    ...(opts.tokenizer ? { tokenizer: opts.tokenizer } : {}),
    ...(opts.toolParser ? { toolParser: opts.toolParser } : {}),
  });
  const policy = oracle ? 'oracle backend' : `backends ${runtime.listBackends().map((b) => `${b.protocol}+${b.url}`).join(', ')}`;
  const description = `${policy}, sandbox driver ${det.driver}`;
  return {
    runtime,
    description,
    async close() {
      // The command is exiting; its exit code already says how the run went.
      await runtime.close({ drain: false }).catch(() => undefined);
    },
  };
}

