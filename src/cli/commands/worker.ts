import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { choiceFlag, numberFlag, parseFlags, UsageError } from '../args.js';
import { OpsLog, opsSnapshotOf } from '../../server/ops-log.js';
import { systemClock } from '../../clock.js';
import { ClusterWorker } from '../../cluster/cluster-worker.js';
import { withRedisPassword } from '../../cluster/redis-connection.js';
import { RolloutError } from '../../errors.js';
import { createQwen3Codec } from '../../llm/qwen3-codec.js';
import { createSandboxProvider } from '../../sandbox/index.js';
import type { SandboxProvider } from '../../sandbox/sandbox.js';
import type { SandboxOptionsInput } from '../../sandbox/sandbox-options.js';
import { checkStateDir } from '../state-dir-check.js';
import { serviceRuntimeFactory } from '../../server/runtime-factory.js';

const USAGE = `usage: rollout worker --redis URL [options]

A cluster node: takes rollout jobs from Redis (BullMQ) and runs them with its own sandboxes,
stage pools and backend pool. Backends, weight versions and pause/resume come from the gateways
(rollout serve --redis URL). It exits 2 at start-up when the sandbox uid cannot reach the state
dir; a node whose sandboxes start failing later takes no jobs (hands the failed one back) until a
probe sandbox starts again.

  --redis URL          redis://host:port of the cluster (required)
  --prefix NAME        key prefix of the cluster (default rollout; the same on every node)
  --redis-password-file FILE
                       the Redis password, when the URL has none (else REDIS_PASSWORD, or the
                       file REDIS_PASSWORD_FILE names): kept out of argv
  --capacity N         rollouts run at once on this node (default 16)
  --state-dir DIR      sandbox leases; a node restarted on the same dir reaps what a killed one left
  --sandbox DRIVER     auto | bwrap | unshare | none (default auto)
  --config FILE        JSON {"runtime": {...}, "pool": {...}, "cluster": {...}, "sandbox": {...}}
  --lock-ms MS         job lock; a silent node loses its jobs after about lock + 2 x stalled (default 30000)
  --stalled-ms MS      stalled-job check period (default 15000)
  --heartbeat-ms MS    node heartbeat period (default 1000)
  --node-id ID         name in heartbeats (default host-pid-random)
  --log-format FORMAT  text | json: the operational log on stderr (a stats line every --stats-every
                       seconds while work flows, a line when a backend goes up or down)
  --stats-every SECONDS  between stats lines (default 10)
`;

const ConfigSchema = z
  .object({
    runtime: z.record(z.string(), z.unknown()).optional(),
    pool: z.record(z.string(), z.unknown()).optional(),
    cluster: z.record(z.string(), z.unknown()).optional(),
    sandbox: z.record(z.string(), z.unknown()).optional(),
  })
  .strict();

const SANDBOX_FLAGS = ['auto', 'bwrap', 'unshare', 'none'] as const;

/**
 * `rollout worker`: prints `worker <id> ready` once it takes jobs; SIGINT / SIGTERM hand its
 * running jobs back to the queue, kill its sandboxes and exit 0. Returns 2 on bad flags.
 */
export async function run(argv: string[]): Promise<number> {
  const flags = parseFlags('worker', argv, {
    redis: { type: 'string' },
    prefix: { type: 'string' },
    'redis-password-file': { type: 'string' },
    capacity: { type: 'string' },
    'state-dir': { type: 'string' },
    sandbox: { type: 'string' },
    config: { type: 'string' },
    'lock-ms': { type: 'string' },
    'stalled-ms': { type: 'string' },
    'heartbeat-ms': { type: 'string' },
    'node-id': { type: 'string' },
    'log-format': { type: 'string' },
    'stats-every': { type: 'string' },
  }, USAGE);
  if (typeof flags === 'number') return flags;
  const v = flags.values;
  let node: ClusterWorker | null = null;
  let opsLog: OpsLog | null = null;
  try {
    if (!v.redis) throw new UsageError('--redis URL is required');
    const logFormat = choiceFlag('log-format', v['log-format'], ['text', 'json'] as const) ?? 'text';
    const statsEvery = numberFlag('stats-every', v['stats-every']) ?? 10;
    if (!(statsEvery > 0)) throw new UsageError(`--stats-every must be a positive number of seconds, got '${v['stats-every']}'`);
    const driver = v.sandbox ?? 'auto';
    if (!(SANDBOX_FLAGS as readonly string[]).includes(driver)) throw new UsageError(`--sandbox must be ${SANDBOX_FLAGS.join(', ')}, got '${driver}'`);
    let config: z.infer<typeof ConfigSchema> = {};
    if (v.config) {
      const r = ConfigSchema.safeParse(JSON.parse(readFileSync(v.config, 'utf8')));
      if (!r.success) throw new UsageError(`bad --config ${v.config}: ${r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
      config = r.data;
    }
    const capacity = numberFlag('capacity', v.capacity, { integer: true }) ?? 16;
    if (capacity < 1) throw new UsageError('--capacity must be at least 1');
    const stateDir = v['state-dir'];
    // Before joining the queue: a node whose sandboxes cannot start must not take jobs (#28 §4).
    checkStateDir({ ...(config.sandbox ?? {}), ...(stateDir ? { stateDir } : {}) } as SandboxOptionsInput);
    const codec = createQwen3Codec();
    // The node's provider, kept for its health probe: a sandbox started and closed (#28 §4).
    let provider: SandboxProvider | null = null;
    let probes = 0;
    const runtimeConfig = (config.runtime ?? {}) as Record<string, unknown>;
    node = await ClusterWorker.start(
      {
        ...(config.cluster ?? {}),
        redis: withRedisPassword(v.redis, { file: v['redis-password-file'], env: process.env }),
        ...(v.prefix ? { prefix: v.prefix } : {}),
        ...(v['lock-ms'] ? { lockDurationMs: numberFlag('lock-ms', v['lock-ms'], { integer: true }) } : {}),
        ...(v['stalled-ms'] ? { stalledIntervalMs: numberFlag('stalled-ms', v['stalled-ms'], { integer: true }) } : {}),
        ...(v['heartbeat-ms'] ? { heartbeatMs: numberFlag('heartbeat-ms', v['heartbeat-ms'], { integer: true }) } : {}),
      },
      {
        capacity,
        nodeId: v['node-id'],
        log: (line) => process.stderr.write(`rollout worker: ${line}\n`),
        probeSandbox: async () => {
          if (!provider) return;
          const sb = await provider.create({}, { rolloutId: `health-probe-${++probes}` });
          await sb.close();
        },
        createRuntime: ({ sharedLoad }) => serviceRuntimeFactory({
          codec,
          sharedLoad,
          sandboxes: (): SandboxProvider => (provider = createSandboxProvider({ ...(config.sandbox ?? {}), driver: driver as 'auto', ...(stateDir ? { stateDir } : {}) })),
          // The node's stage pools default to its capacity: BullMQ never hands it more.
          runtime: { stages: { init: capacity, run: capacity }, ...runtimeConfig } as never,
          pool: config.pool as never,
          retainEvents: 0,
        })(),
      },
    );
    // The signal handlers go in before `ready` is printed: a supervisor that stops the worker as
    // soon as it reads the line must reach them, not the signal's default death.
    const stopped = new Promise<void>((resolve) => {
      const stop = (sig: string): void => {
        process.stderr.write(`rollout worker: ${sig}, handing jobs back\n`);
        resolve();
      };
      process.once('SIGINT', () => stop('SIGINT'));
      process.once('SIGTERM', () => stop('SIGTERM'));
    });
    const observed = node.observed;
    opsLog = new OpsLog({ source: opsSnapshotOf(() => observed), write: (l) => process.stderr.write(`${logFormat === 'json' ? '' : 'rollout worker: '}${l}\n`), format: logFormat, clock: systemClock, statsMs: statsEvery * 1000 });
    opsLog.start();
    process.stdout.write(`worker ${node.nodeId} ready\n`);
    await stopped;
    opsLog.stop();
    await node.close();
    return 0;
  } catch (err) {
    // Start-up failed: `err` is what the user must see, not a close error after it.
    opsLog?.stop();
    await node?.close().catch(() => undefined);
    const e = err as Error & { issues?: { path: string; message: string }[] };
    const detail = e.issues?.length ? `: ${e.issues.map((i) => `${i.path}: ${i.message}`).join('; ')}` : '';
    process.stderr.write(`rollout worker: ${e.message}${detail}\n`);
    return e instanceof RolloutError || e instanceof UsageError || e instanceof SyntaxError ? 2 : 1;
  }
}
