import { resolve as pathResolve } from 'node:path';
import { readFileSync } from 'node:fs';
import { choiceFlag, numberFlag, parseFlags, UsageError } from '../args.js';
import { referenceArgv } from '../reference-flags.js';
import { OpsLog, opsSnapshotOf } from '../../server/ops-log.js';
import { z } from 'zod';
import type { SandboxProvider } from '../../sandbox/sandbox.js';
import { createSandboxProvider } from '../../sandbox/index.js';
import { checkStateDir } from '../state-dir-check.js';
import { codecFor } from '../../llm/codec-registry.js';
import { createInspector, type InspectSelection, type RuntimeInspector } from '../../runtime/inspection.js';
import { RolloutError } from '../../errors.js';
import { serviceRuntimeFactory } from '../../server/runtime-factory.js';
import { clusterRuntimeFactory } from '../../cluster/gateway-factory.js';
import { createService } from '../../server/service.js';
import { serveVisualizer } from '../../server/visualizer-assets.js';
import type { ServiceOptionsInput } from '../../server/service-options.js';
import { checkExposure, repeatWarning } from '../../server/exposure.js';
import { systemClock, type Clock } from '../../clock.js';
import { isOracleAddress } from '../../llm/oracle-backend.js';
import type { BackendProbe } from '../../llm/backend-probe.js';
import { detectDriver } from '../../sandbox/index.js';
import { formatBanner } from '../banner.js';
import { backendCheck, checkDisk, formatCheck, probeBackends } from '../preflight.js';

const USAGE = `usage: rollout serve [options]

  --host HOST          interface to bind (default 127.0.0.1)
  --port PORT          port (default 8006; 0 picks a free one)
  --backend ADDRESS    LLM backend, repeatable: http://h:p, vllm+http://h:p, sglang+http://h:p, oracle
  --config FILE        JSON {"service": {...}, "runtime": {...}, "pool": {...}, "backends": [...]}
  --token SECRET       require Authorization: Bearer SECRET (also ROLLOUT_TOKEN); /healthz stays open
  --sandbox DRIVER     auto | bwrap | unshare | none (default auto)
  --inspect URL        send XState inspection events to a ws:// inspector
  --inspect-rollouts IDS   inspect only these rollouts (comma-separated ids; with the two below: any match)
  --inspect-groups IDS     inspect only these GRPO groups (comma-separated group ids)
  --inspect-sample RATE    inspect a stable share of rollouts (0..1; whole groups are kept together)
  --state-dir DIR      sandbox leases and Polar task records (default: the OS temp dir; records then in memory only)
  --image-store DIR    task images (default: $ROLLOUT_IMAGE_STORE, else ~/.cache/rollout-runtime/images)
  --polar-image MODE   Polar's runtime.image: strict (default: each session runs in that image of the store;
                       a task naming one the store lacks is refused, 422) | ignore (run on the default root)
  --image-alias FROM=TO  run Polar's runtime.image FROM as the image-store image TO (repeatable; FROM * maps
                       every image no other alias names)
  --retain N           events kept for WebSocket resume (default 50000)
  --body-limit BYTES   request body limit (default 10485760)
  --stopped            start without a runtime until POST /start (the reference's behaviour)
  --insecure           allow a non-loopback --host without --token (warns every minute)
  --path-root DIR      a directory API clients may name (instance repo_dir, tokenizer dirs...), repeatable;
                       none by default: path-like instance fields from the API are refused

  The reference server's flags, mapped onto ours:
  --timeout SECONDS          time budget per rollout (runtime budgetMs)
  --max-init-workers N       INIT stage concurrency (runtime stages.init)
  --max-run-workers N        RUN stage concurrency (runtime stages.run)
  --max-eval-workers N       EVAL stage concurrency (runtime stages.eval)
  --llm-server-address [ADDR ...]   backends, as --backend each
  --allow-skip-eval BOOL     accepted; no effect (every rollout here is evaluated by its handler)
  --reward-server-ip [IP ...]      accepted; no effect (rewards are computed by the task handlers in-process)
  --use-thread-based-server  accepted; no effect (rollouts are actors in one process)
  (argparse forms: --flag=value, and a unique prefix of these flags)
  --tokenizer DIR      Hugging Face model directory whose tokenizer and chat template rollouts use
                       (also "tokenizer" in --config; default: Qwen3)
  --tool-parser NAME   hermes | qwen3_coder | llama3_json | mistral | deepseek_v3 | openai (also "toolParser"
                       in --config; default: the format the chat template writes)
  --log-format FORMAT  text | json: the operational log on stderr (a stats line every --stats-every
                       seconds while work flows, a line when a backend or worker goes up or down)
  --stats-every SECONDS  between stats lines (default 10)
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
    tokenizer: z.string().min(1).optional(),
    toolParser: z.string().min(1).optional(),
  })
  .strict();

/** `rollout serve`'s own flags (the reference's, read by reference-flags.ts, map onto these). */
const SERVE_FLAGS = {
  host: { type: 'string' },
  port: { type: 'string' },
  backend: { type: 'string', multiple: true },
  config: { type: 'string' },
  token: { type: 'string' },
  sandbox: { type: 'string' },
  inspect: { type: 'string' },
  'inspect-rollouts': { type: 'string' },
  'inspect-groups': { type: 'string' },
  'inspect-sample': { type: 'string' },
  'state-dir': { type: 'string' },
  'image-store': { type: 'string' },
  'polar-image': { type: 'string' },
  'image-alias': { type: 'string', multiple: true },
  retain: { type: 'string' },
  'body-limit': { type: 'string' },
  stopped: { type: 'boolean' },
  insecure: { type: 'boolean' },
  'path-root': { type: 'string', multiple: true },
  timeout: { type: 'string' },
  'max-init-workers': { type: 'string' },
  'max-run-workers': { type: 'string' },
  'max-eval-workers': { type: 'string' },
  tokenizer: { type: 'string' },
  'tool-parser': { type: 'string' },
  redis: { type: 'string' },
  'redis-prefix': { type: 'string' },
  'log-format': { type: 'string' },
  'stats-every': { type: 'string' },
} as const;

/** What `rollout serve` runs on besides its flags (injected in tests). */
export interface ServeDeps {
  /** Timers of the `--insecure` reminder. Default: real, unref'd intervals. */
  clock?: Clock | undefined;
}

/**
 * `rollout serve`: the HTTP + WebSocket service. Prints `listening on http://host:port` once it
 * accepts connections; SIGINT / SIGTERM close it (live rollouts cancelled, sandboxes killed) and
 * the process exits 0. Returns 2 on bad flags or config.
 */
export async function run(argv: string[], deps: ServeDeps = {}): Promise<number> {
  // The reference's start_server.py flags, with argparse's semantics, rewritten into ours (#28).
  let translated: ReturnType<typeof referenceArgv>;
  try {
    translated = referenceArgv(argv, Object.keys(SERVE_FLAGS));
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`rollout serve: ${err.message}\n\n${USAGE}`);
    return 2;
  }
  for (const n of translated.notes) process.stderr.write(`rollout serve: note: ${n}\n`);
  const flags = parseFlags('serve', translated.argv, SERVE_FLAGS, USAGE);
  if (typeof flags === 'number') return flags;
  const values = flags.values;
  // The sandbox provider reads the store from here (docs/images.md).
  if (values['image-store']) process.env.ROLLOUT_IMAGE_STORE = pathResolve(values['image-store']);

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
  let opsLog: OpsLog | null = null;
  let stopWarning = (): void => undefined;
  let removeSignalHandlers = (): void => undefined;
  try {
    const serviceOptions: ServiceOptionsInput = {
      ...(config.service as ServiceOptionsInput | undefined),
      ...(values.host ? { host: values.host } : {}),
      ...(values.port !== undefined ? { port: numberFlag('port', values.port, { integer: true }) } : {}),
      ...(values['body-limit'] !== undefined ? { bodyLimitBytes: numberFlag('body-limit', values['body-limit'], { integer: true }) } : {}),
    };
    const token = values.token ?? process.env['ROLLOUT_TOKEN'];
    if (token) serviceOptions.token = token;
    if (values['path-root']?.length) serviceOptions.pathRoots = [...(serviceOptions.pathRoots ?? []), ...values['path-root']];
    const polarImage = choiceFlag('polar-image', values['polar-image'], ['strict', 'ignore'] as const);
    if (polarImage) serviceOptions.polarImage = polarImage;
    if (values['image-alias']?.length) serviceOptions.imageAliases = { ...(serviceOptions.imageAliases ?? {}), ...parseImageAliases(values['image-alias']) };
    // Checked before anything starts: an exposed, open service must not even begin (#9.6).
    const exposure = checkExposure(serviceOptions.host ?? '127.0.0.1', token, values.insecure ?? false);
    if (exposure.kind === 'refused') {
      process.stderr.write(`rollout serve: ${exposure.reason}\n`);
      return 2;
    }
    const runtimeOptions = referenceFlags(values, config.runtime);
    const logFormat = choiceFlag('log-format', values['log-format'], ['text', 'json'] as const) ?? 'text';
    const statsEvery = numberFlag('stats-every', values['stats-every']) ?? 10;
    if (!(statsEvery > 0)) throw new UsageError(`--stats-every must be a positive number of seconds, got '${values['stats-every']}'`);
    if (values.inspect !== undefined && !/^wss?:\/\/[^/]/.test(values.inspect)) throw new UsageError(`--inspect must be a ws:// or wss:// URL, got '${values.inspect}'`);
    inspector = values.inspect ? createInspector(values.inspect, { only: inspectSelection(values) }) : null;
    const driver = sandboxDriver(values.sandbox ?? 'auto');
    const stateDir = values['state-dir'];
    // A state dir the sandbox uid cannot reach fails every rollout: say so now (#28 §4). A
    // gateway (--redis) runs no sandbox.
    if (!values.redis) {
      try {
        checkStateDir(stateDir ? { stateDir } : {});
      } catch (err) {
        process.stderr.write(`rollout serve: ${(err as Error).message}\n`);
        return 2;
      }
    }
    // --redis: the same service, fronting a cluster (src/cluster); rollouts run on `rollout worker`s.
    // A gateway runs no rollout: it builds no codec (about a second of CPU per start).
    const factory = values.redis
      ? clusterRuntimeFactory({ redis: values.redis, ...(values['redis-prefix'] ? { prefix: values['redis-prefix'] } : {}) })
      : serviceRuntimeFactory({
          codec: codecFor({ tokenizer: values.tokenizer ?? config.tokenizer, toolParser: values['tool-parser'] ?? config.toolParser }),
          sandboxes: () => makeSandboxes(driver, stateDir),
          runtime: runtimeOptions as never,
          pool: config.pool as never,
          inspect: inspector?.inspect,
          retainEvents: numberFlag('retain', values.retain, { integer: true }) ?? 50_000,
        });
    const backends = [...(config.backends ?? []), ...(values.backend ?? [])].map((address) => ({ address }));
    const service = createService(
      { createRuntime: factory, backends, startStopped: values.stopped ?? false, visualizer: serveVisualizer, stateDir },
      serviceOptions,
    );
    // The signal handlers go in before the service listens: a SIGTERM that comes while the
    // start-up probes run (a client may act on `listening on` at once) must close the service,
    // not kill the process by the default action.
    const signalled = new Promise<void>((resolve) => {
      const stop = (sig: NodeJS.Signals): void => {
        removeSignalHandlers();
        process.stderr.write(`rollout serve: ${sig}, closing\n`);
        resolve();
      };
      process.on('SIGINT', stop);
      process.on('SIGTERM', stop);
      removeSignalHandlers = () => {
        process.off('SIGINT', stop);
        process.off('SIGTERM', stop);
      };
    });
    const url = await service.listen();
    process.stdout.write(`listening on ${url}\n`);
    opsLog = new OpsLog({ source: opsSnapshotOf(() => service.runtime), write: (l) => process.stderr.write(`${logFormat === 'json' ? '' : 'rollout serve: '}${l}\n`), format: logFormat, clock: deps.clock ?? systemClock, statsMs: statsEvery * 1000 });
    opsLog.start();
    if (exposure.kind === 'insecure') stopWarning = repeatWarning(exposure.warning, (l) => process.stderr.write(l), deps.clock);
    // The same backend checks as `rollout run` (src/cli/preflight.ts), after listening so a dead
    // backend delays nothing: a failing one gets a line on stderr and shows `down` in /status.
    const probes = await probeBackends(backends.map((b) => b.address).filter((a) => !isOracleAddress(a)), { timeoutMs: 3000 });
    for (const c of [...probes.map(backendCheck), checkDisk()]) if (c.status !== 'ok') process.stderr.write(`rollout serve: ${formatCheck(c)}\n`);
    const det = detectDriver(driver);
    const models = [...new Set(probes.map((p) => p.model).filter((m): m is string => m !== null))];
    process.stdout.write(
      formatBanner([
        ['visualizer', `${url}/visualizer`],
        ['api', `${url}/v1/openapi.json (ProRL routes: /process, /status, ...)`],
        ['backends', backends.length === 0 ? 'none yet: POST /add_llm_server {"address": ...} or /v1/backends' : backends.map((b) => backendLabel(b.address, probes)).join(', ')],
        ['model', [models.length > 0 ? models.join(', ') : null, `tokenizer ${values.tokenizer ?? config.tokenizer ?? 'Qwen3 (default)'}`].filter(Boolean).join('; ')],
        ['sandbox', values.redis ? 'on the workers (--redis)' : `${det.driver} (${det.reason})`],
        ['cluster', values.redis ? `gateway on ${values.redis}` : null],
        ['inspect', values.inspect ?? null],
      ]),
    );

    await signalled;
    opsLog.stop();
    stopWarning();
    await service.close();
    await inspector?.close();
    return 0;
  } catch (err) {
    removeSignalHandlers();
    opsLog?.stop();
    stopWarning();
    await inspector?.close();
    const e = err as Error & { issues?: { path: string; message: string }[] };
    const detail = e.issues?.length ? `: ${e.issues.map((i) => `${i.path}: ${i.message}`).join('; ')}` : '';
    process.stderr.write(`rollout serve: ${e.message}${detail}\n`);
    return e instanceof RolloutError || e instanceof UsageError ? 2 : 1;
  }
}

/** A backend in the banner: its address, with `(down: why)` when the start-up probe failed. */
function backendLabel(address: string, probes: readonly BackendProbe[]): string {
  const p = probes.find((x) => x.address === address);
  if (p === undefined) return address;
  if (!p.ok) return `${address} (${p.reachable ? 'misconfigured' : 'down'}: ${p.detail})`;
  return p.slots !== null ? `${address} (${p.slots} slots)` : address;
}

/**
 * `--inspect-rollouts`, `--inspect-groups`, `--inspect-sample` as an inspector's `only`; throws
 * UsageError naming the flag for a rate outside 0..1, or for a narrowing flag without `--inspect`.
 */
export function inspectSelection(v: { inspect?: string | undefined; 'inspect-rollouts'?: string | undefined; 'inspect-groups'?: string | undefined; 'inspect-sample'?: string | undefined }): InspectSelection | undefined {
  const list = (x: string | undefined): string[] | undefined => (x === undefined ? undefined : x.split(',').map((s) => s.trim()).filter(Boolean));
  const rate = numberFlag('inspect-sample', v['inspect-sample']);
  if (rate !== undefined && !(rate >= 0 && rate <= 1)) throw new UsageError(`--inspect-sample must be a number in [0, 1], got '${v['inspect-sample']}'`);
  const only: InspectSelection = {
    ...(list(v['inspect-rollouts']) ? { rollouts: list(v['inspect-rollouts']) } : {}),
    ...(list(v['inspect-groups']) ? { groups: list(v['inspect-groups']) } : {}),
    ...(rate !== undefined ? { sampleRate: rate } : {}),
  };
  if (Object.keys(only).length === 0) return undefined;
  if (!v.inspect) throw new UsageError('--inspect-rollouts, --inspect-groups and --inspect-sample narrow --inspect URL: give --inspect too');
  return only;
}

/**
 * The sandbox provider for `--sandbox`: one of the sandbox area's drivers (the in-memory fake
 * is for tests only and lives in `rollout-runtime/testing`).
 */
function makeSandboxes(driver: SandboxFlag, stateDir: string | undefined): SandboxProvider {
  return createSandboxProvider({ driver, ...(stateDir ? { stateDir } : {}) });
}

/** `--image-alias FROM=TO` flags as a map (a later FROM wins); a UsageError names the one without both sides. */
export function parseImageAliases(flags: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const f of flags) {
    const i = f.indexOf('=');
    const from = f.slice(0, i).trim();
    const to = f.slice(i + 1).trim();
    if (i < 0 || !from || !to) throw new UsageError(`--image-alias must be FROM=TO (a Docker reference, or *, and an image-store name), got '${f}'`);
    out[from] = to;
  }
  return out;
}

const SANDBOX_FLAGS = ['auto', 'bwrap', 'unshare', 'none'] as const;
type SandboxFlag = (typeof SANDBOX_FLAGS)[number];

/** Checks `--sandbox` at start-up, so a typo fails now and not at the first `/start`. */
function sandboxDriver(value: string): SandboxFlag {
  if (!(SANDBOX_FLAGS as readonly string[]).includes(value)) throw new UsageError(`--sandbox must be auto, bwrap, unshare or none, got '${value}'`);
  return value as SandboxFlag;
}

/**
 * Maps the reference server's flags (REFERENCE.md §5) onto runtime options, over `--config`'s
 * `runtime` section (flags win). The reference's flags without a meaning here (`--allow-skip-eval`,
 * `--reward-server-ip`, `--use-thread-based-server`) were taken out by reference-flags.ts with a
 * one-line note each, so a launcher written for the reference runs as is.
 */
function referenceFlags(values: Record<string, unknown>, runtime: Record<string, unknown> | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = { ...(runtime ?? {}) };
  const int = (name: string): number | undefined => numberFlag(name, values[name] as string | undefined, { integer: true });
  const timeout = numberFlag('timeout', values['timeout'] as string | undefined);
  if (timeout !== undefined) {
    if (timeout <= 0) throw new UsageError(`--timeout must be a positive number of seconds, got '${String(values['timeout'])}'`);
    out['budgetMs'] = Math.round(timeout * 1000);
  }
  const stages: Record<string, unknown> = { ...((runtime?.['stages'] as Record<string, unknown> | undefined) ?? {}) };
  for (const [flag, stage] of [['max-init-workers', 'init'], ['max-run-workers', 'run'], ['max-eval-workers', 'eval']] as const) {
    const n = int(flag);
    if (n === undefined) continue;
    if (n < 1) throw new UsageError(`--${flag} must be at least 1, got '${String(values[flag])}'`);
    stages[stage] = n;
  }
  if (Object.keys(stages).length > 0) out['stages'] = stages;
  return out;
}
