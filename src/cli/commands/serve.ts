import { readFileSync } from 'node:fs';
import { numberFlag, parseFlags, UsageError } from '../args.js';
import { z } from 'zod';
import type { SandboxProvider } from '../../sandbox/sandbox.js';
import { createSandboxProvider } from '../../sandbox/index.js';
import { createQwen3Codec } from '../../llm/qwen3-codec.js';
import { createInspector, type RuntimeInspector } from '../../runtime/inspection.js';
import { MemorySandboxProvider } from '../../testing/memory-sandbox.js';
import { RolloutError } from '../../errors.js';
import { serviceRuntimeFactory } from '../../server/runtime-factory.js';
import { clusterRuntimeFactory } from '../../cluster/gateway-factory.js';
import { createService } from '../../server/service.js';
import { serveVisualizer } from '../../server/visualizer-assets.js';
import type { ServiceOptionsInput } from '../../server/service-options.js';

const USAGE = `usage: rollout serve [options]

  --host HOST          interface to bind (default 127.0.0.1)
  --port PORT          port (default 8006; 0 picks a free one)
  --backend ADDRESS    LLM backend, repeatable: http://h:p, vllm+http://h:p, sglang+http://h:p, scripted
  --config FILE        JSON {"service": {...}, "runtime": {...}, "pool": {...}, "backends": [...]}
  --token SECRET       require Authorization: Bearer SECRET (also ROLLOUT_TOKEN); /healthz stays open
  --sandbox DRIVER     auto | bwrap | unshare | none | memory (default auto)
  --inspect URL        send XState inspection events to a ws:// inspector
  --state-dir DIR      sandbox leases (default: the OS temp dir)
  --retain N           events kept for WebSocket resume (default 50000)
  --body-limit BYTES   request body limit (default 10485760)
  --stopped            start without a runtime until POST /start (the reference's behaviour)
  --redis URL          be a cluster gateway: rollouts run on \`rollout worker --redis URL\` nodes
  --redis-prefix NAME  the cluster's key prefix (default rollout)
`;

/** The `--config` file. */
const ConfigSchema = z
  .object({
    service: z.record(z.string(), z.unknown()).optional(),
    runtime: z.record(z.string(), z.unknown()).optional(),
    pool: z.record(z.string(), z.unknown()).optional(),
    backends: z.array(z.string()).optional(),
  })
  .strict();

/**
 * `rollout serve`: the HTTP + WebSocket service. Prints `listening on http://host:port` once it
 * accepts connections; SIGINT / SIGTERM close it (live rollouts cancelled, sandboxes killed) and
 * the process exits 0. Returns 2 on bad flags or config.
 */
export async function run(argv: string[]): Promise<number> {
  const flags = parseFlags('serve', argv, {
    host: { type: 'string' },
    port: { type: 'string' },
    backend: { type: 'string', multiple: true },
    config: { type: 'string' },
    token: { type: 'string' },
    sandbox: { type: 'string' },
    inspect: { type: 'string' },
    'state-dir': { type: 'string' },
    retain: { type: 'string' },
    'body-limit': { type: 'string' },
    stopped: { type: 'boolean' },
    redis: { type: 'string' },
    'redis-prefix': { type: 'string' },
  }, USAGE);
  if (typeof flags === 'number') return flags;
  const values = flags.values;

  let config: z.infer<typeof ConfigSchema> = {};
  if (values.config) {
    try {
      const r = ConfigSchema.safeParse(JSON.parse(readFileSync(values.config, 'utf8')));
      if (!r.success) throw new Error(r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '));
      config = r.data;
    } catch (err) {
      process.stderr.write(`rollout serve: bad --config ${values.config}: ${(err as Error).message}\n`);
      return 2;
    }
  }

  let inspector: RuntimeInspector | null = null;
  try {
    const serviceOptions: ServiceOptionsInput = {
      ...(config.service as ServiceOptionsInput | undefined),
      ...(values.host ? { host: values.host } : {}),
      ...(values.port !== undefined ? { port: numberFlag('port', values.port, { integer: true }) } : {}),
      ...(values['body-limit'] !== undefined ? { bodyLimitBytes: numberFlag('body-limit', values['body-limit'], { integer: true }) } : {}),
    };
    const token = values.token ?? process.env['ROLLOUT_TOKEN'];
    if (token) serviceOptions.token = token;
    inspector = values.inspect ? createInspector(values.inspect) : null;
    const driver = sandboxDriver(values.sandbox ?? 'auto');
    const stateDir = values['state-dir'];
    const embedded = serviceRuntimeFactory({
      codec: createQwen3Codec(),
      sandboxes: () => makeSandboxes(driver, stateDir),
      runtime: config.runtime as never,
      pool: config.pool as never,
      inspect: inspector?.inspect,
      retainEvents: numberFlag('retain', values.retain, { integer: true }) ?? 50_000,
    });
    // --redis: the same service, fronting a cluster (src/cluster); rollouts run on `rollout worker`s.
    const factory = values.redis ? clusterRuntimeFactory({ redis: values.redis, ...(values['redis-prefix'] ? { prefix: values['redis-prefix'] } : {}) }) : embedded;
    const backends = [...(config.backends ?? []), ...(values.backend ?? [])].map((address) => ({ address }));
    const service = createService(
      { createRuntime: factory, backends, startStopped: values.stopped ?? false, visualizer: serveVisualizer },
      serviceOptions,
    );
    const url = await service.listen();
    process.stdout.write(`listening on ${url}\n`);
    if (backends.length === 0) process.stdout.write('no backend yet: POST /add_llm_server {"address": ...} or /v1/backends\n');

    await new Promise<void>((resolve) => {
      let closing = false;
      const stop = (sig: string): void => {
        if (closing) return;
        closing = true;
        process.stderr.write(`rollout serve: ${sig}, closing\n`);
        resolve();
      };
      process.once('SIGINT', () => stop('SIGINT'));
      process.once('SIGTERM', () => stop('SIGTERM'));
    });
    await service.close();
    await inspector?.close();
    return 0;
  } catch (err) {
    await inspector?.close();
    const e = err as Error & { issues?: { path: string; message: string }[] };
    const detail = e.issues?.length ? `: ${e.issues.map((i) => `${i.path}: ${i.message}`).join('; ')}` : '';
    process.stderr.write(`rollout serve: ${e.message}${detail}\n`);
    return e instanceof RolloutError || e instanceof UsageError ? 2 : 1;
  }
}

/**
 * The sandbox provider for `--sandbox`. `memory` is the in-process fake (development only: it
 * understands a handful of shell builtins); the others are the sandbox area's drivers.
 */
function makeSandboxes(driver: SandboxFlag, stateDir: string | undefined): SandboxProvider {
  if (driver === 'memory') return new MemorySandboxProvider();
  return createSandboxProvider({ driver, ...(stateDir ? { stateDir } : {}) });
}

const SANDBOX_FLAGS = ['auto', 'bwrap', 'unshare', 'none', 'memory'] as const;
type SandboxFlag = (typeof SANDBOX_FLAGS)[number];

/** Checks `--sandbox` at start-up, so a typo fails now and not at the first `/start`. */
function sandboxDriver(value: string): SandboxFlag {
  if (!(SANDBOX_FLAGS as readonly string[]).includes(value)) throw new UsageError(`--sandbox must be auto, bwrap, unshare, none or memory, got '${value}'`);
  return value as SandboxFlag;
}
