import { z } from 'zod';
import { SandboxIntegritySchema } from './integrity.js';
import { ResolvedImageSchema } from './image.js';

/**
 * Messages between the runtime (the sandbox client) and a sandbox host, over the msgpack
 * Unix-socket channel of src/ipc/. Requests go runtime → host; each answer is
 * `<type>.result` or `error`. The host also sends two notifications, `sandbox.lost` and
 * `sandbox.shellExit`.
 * Field names are snake_case-free camelCase; every map is a plain msgpack map.
 */

/** What a sandbox is made from (mirrors `SandboxSpec` of src/sandbox/sandbox.ts). */
export const SandboxSpecSchema = z.object({
  files: z.record(z.string(), z.string()).optional(),
  seedDir: z.string().optional(),
  gitRepo: z.string().optional(),
  setup: z.array(z.string()).optional(),
  network: z.boolean().optional(),
  env: z.record(z.string(), z.string()).optional(),
  /** An image of the image store (name or digest): the sandbox's root becomes a copy-on-write overlay of it. */
  image: z.string().min(1).max(500).optional(),
  /**
   * A per-rollout LLM proxy: the host path of the Unix socket its HTTP server listens on (an
   * absolute path of at most 107 bytes, the kernel's limit) and the token the sandbox presents.
   */
  llmProxy: z
    .object({
      socketPath: z.string().min(2).max(107).refine((p) => p.startsWith('/'), { message: 'must be an absolute path' }),
      token: z.string().min(1).max(512).regex(/^[\x21-\x7e]+$/, { message: 'must be printable ASCII without spaces' }),
    })
    .strict()
    .optional(),
  /** The host's harness store directory (absolute), shown read-only at /run/rollout/harness with a Node binary (src/sandbox/harness-mount.ts). */
  harnessStore: z.string().min(2).max(4096).refine((p) => p.startsWith('/'), { message: 'must be an absolute path' }).optional(),
});

export const BashResultSchema = z.object({
  output: z.string(),
  exitCode: z.number().int().nullable(),
  cwd: z.string(),
  timedOut: z.boolean(),
  truncated: z.boolean(),
});

export const PythonResultSchema = z.object({
  output: z.string(),
  error: z.string().nullable(),
  timedOut: z.boolean(),
});

export const EditorRequestSchema = z.discriminatedUnion('command', [
  z.object({ command: z.literal('view'), path: z.string(), view_range: z.tuple([z.number().int(), z.number().int()]).optional() }),
  z.object({ command: z.literal('create'), path: z.string(), file_text: z.string() }),
  z.object({ command: z.literal('str_replace'), path: z.string(), old_str: z.string(), new_str: z.string().optional() }),
  z.object({ command: z.literal('insert'), path: z.string(), insert_line: z.number().int(), new_str: z.string() }),
  z.object({ command: z.literal('undo_edit'), path: z.string() }),
]);

export const EditorResultSchema = z.object({ output: z.string(), error: z.boolean() });

/** Limits applied to one sandbox's process tree. */
export const SandboxLimitsSchema = z.object({
  /** Processes (and threads) at once: cgroup pids.max, or RLIMIT_NPROC without a cgroup. */
  maxProcesses: z.number().int().positive(),
  /** RLIMIT_AS per process, bytes. */
  memoryBytes: z.number().int().positive(),
  /** RLIMIT_FSIZE, bytes: the largest file a process may write. */
  fileSizeBytes: z.number().int().positive(),
  /** RLIMIT_CPU per process, seconds. */
  cpuSeconds: z.number().int().positive(),
  /** Memory of the whole sandbox (cgroup memory.limit_in_bytes, tmpfs pages included), bytes. */
  totalMemoryBytes: z.number().int().positive(),
  /** Size of the sandbox's private /tmp (and /dev/shm) tmpfs, bytes. */
  tmpBytes: z.number().int().positive(),
  /** Size of the filesystem holding /workspace, bytes. */
  workdirBytes: z.number().int().positive(),
});

/** Tool settings a host applies to one sandbox. */
export const SandboxToolSettingsSchema = z.object({
  bashTimeoutMs: z.number().int().positive(),
  noOutputTimeoutMs: z.number().int().positive(),
  pythonTimeoutMs: z.number().int().positive(),
  maxOutputChars: z.number().int().positive(),
  startTimeoutMs: z.number().int().positive(),
});

// ---- requests (runtime → host) ----

/** First message on a connection: who owns the host. */
export const HostHelloSchema = z.object({
  type: z.literal('host.hello'),
  id: z.number().int(),
  runtimeId: z.string(),
  ownerPid: z.number().int(),
  ownerStart: z.string().nullable(),
  /** The host's pool of parked fork branches (fork-pool.ts); absent: none. */
  forkPool: z.object({ size: z.number().int().min(0).max(64), idleMs: z.number().int().positive() }).optional(),
});
export const HostHelloResultSchema = z.object({
  type: z.literal('host.hello.result'),
  id: z.number().int(),
  pid: z.number().int(),
});

export const SandboxCreateSchema = z.object({
  type: z.literal('sandbox.create'),
  id: z.number().int(),
  sandboxId: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/),
  rolloutId: z.string(),
  spec: SandboxSpecSchema,
  driver: z.enum(['bwrap', 'unshare', 'none']),
  rootfs: z.string().nullable(),
  /** The resolved `spec.image` (layers and config), or absent for a host-root sandbox. */
  image: ResolvedImageSchema.nullable().optional(),
  limits: SandboxLimitsSchema,
  tools: SandboxToolSettingsSchema,
  /** Host uid/gid the sandbox's processes run as; null keeps the host's own (not root). */
  sandboxUid: z.number().int().min(1).max(0xfffffffe).nullable().default(null),
});
export const SandboxCreateResultSchema = z.object({
  type: z.literal('sandbox.create.result'),
  id: z.number().int(),
  sandboxId: z.string(),
  workdir: z.string(),
  /** `OPENAI_BASE_URL` inside the sandbox, when it was made with `spec.llmProxy`. */
  llmProxyUrl: z.string().optional(),
});

export const SandboxBashSchema = z.object({
  type: z.literal('sandbox.bash'),
  id: z.number().int(),
  sandboxId: z.string(),
  command: z.string(),
  isInput: z.boolean().optional(),
  timeoutMs: z.number().int().positive().optional(),
});
export const SandboxBashResultSchema = z.object({ type: z.literal('sandbox.bash.result'), id: z.number().int(), result: BashResultSchema });

export const SandboxPythonSchema = z.object({
  type: z.literal('sandbox.python'),
  id: z.number().int(),
  sandboxId: z.string(),
  code: z.string(),
  timeoutMs: z.number().int().positive().optional(),
});
export const SandboxPythonResultSchema = z.object({ type: z.literal('sandbox.python.result'), id: z.number().int(), result: PythonResultSchema });

export const SandboxEditorSchema = z.object({
  type: z.literal('sandbox.editor'),
  id: z.number().int(),
  sandboxId: z.string(),
  request: EditorRequestSchema,
});
export const SandboxEditorResultSchema = z.object({ type: z.literal('sandbox.editor.result'), id: z.number().int(), result: EditorResultSchema });

export const SandboxReadSchema = z.object({ type: z.literal('sandbox.read'), id: z.number().int(), sandboxId: z.string(), path: z.string() });
export const SandboxReadResultSchema = z.object({ type: z.literal('sandbox.read.result'), id: z.number().int(), content: z.string() });

export const SandboxWriteSchema = z.object({
  type: z.literal('sandbox.write'),
  id: z.number().int(),
  sandboxId: z.string(),
  path: z.string(),
  content: z.string(),
});
export const SandboxWriteResultSchema = z.object({ type: z.literal('sandbox.write.result'), id: z.number().int() });

/**
 * Kills every process of the sandbox except its shell (and Python REPL): used on cancel and to end
 * a harness. `signal` SIGINT asks them to stop instead (sent once); default SIGKILL, a sweep.
 */
export const SandboxInterruptSchema = z.object({ type: z.literal('sandbox.interrupt'), id: z.number().int(), sandboxId: z.string(), signal: z.enum(['SIGINT', 'SIGKILL']).optional() });
export const SandboxInterruptResultSchema = z.object({ type: z.literal('sandbox.interrupt.result'), id: z.number().int(), killed: z.number().int() });

/**
 * Ends every process of the sandbox — its shell and Python REPL too — and starts a fresh shell:
 * the root and the workspace stay as they are; shell state, /tmp and processes do not. Used
 * before an eval, so nothing the policy left in its shell can answer for the eval.
 */
export const SandboxResetSchema = z.object({ type: z.literal('sandbox.reset'), id: z.number().int(), sandboxId: z.string() });
export const SandboxResetResultSchema = z.object({ type: z.literal('sandbox.reset.result'), id: z.number().int() });

/**
 * Forks a sandbox at a turn boundary (#26): its processes are frozen while its filesystem and
 * shell state are captured, and one branch sandbox per `branches` entry is made on the same
 * host from that snapshot (src/sandbox/host-sandbox.ts `fork`). `keepParent` false closes the
 * parent at the fork (its files become the branches' lower layer without a copy).
 */
export const SandboxForkSchema = z.object({
  type: z.literal('sandbox.fork'),
  id: z.number().int(),
  sandboxId: z.string(),
  keepParent: z.boolean(),
  branches: z
    .array(z.object({ sandboxId: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/), rolloutId: z.string(), llmProxy: SandboxSpecSchema.shape.llmProxy }))
    .min(1)
    .max(256),
});
export const SandboxForkResultSchema = z.object({
  type: z.literal('sandbox.fork.result'),
  id: z.number().int(),
  /** The branches' sandbox ids, in the order asked. */
  branches: z.array(z.string()),
  /** Each branch's `OPENAI_BASE_URL` inside it (a branch given an `llmProxy`), else null. */
  llmProxyUrls: z.array(z.string().nullable()).optional(),
  lost: z.array(z.string()),
  frozenMs: z.number().nonnegative(),
  copiedBytes: z.number().int().nonnegative(),
});

/**
 * Parks up to `n` fork branches of a live sandbox's configuration in its host's fork pool before
 * its first fork (#26: src/sandbox/host-fork.ts `prewarmFork`), so that fork takes them instead
 * of launching its own. `parked`: how many are parked or starting for it now (0: its forks cannot
 * use the pool — an image sandbox, the unshare driver, the pool disabled, an LLM-proxied sandbox).
 */
export const SandboxForkPrewarmSchema = z.object({ type: z.literal('sandbox.forkPrewarm'), id: z.number().int(), sandboxId: z.string(), n: z.number().int().min(1).max(64) });
export const SandboxForkPrewarmResultSchema = z.object({ type: z.literal('sandbox.forkPrewarm.result'), id: z.number().int(), parked: z.number().int().nonnegative() });

/** Counters of a host's fork pool (src/sandbox/fork-pool.ts), for metrics. */
export const ForkPoolStatsSchema = z.object({
  /** Configurations with a pool. */
  keys: z.number().int().nonnegative(),
  /** Parked branches, all configurations. */
  parked: z.number().int().nonnegative(),
  /** Branches being launched into the pool. */
  starting: z.number().int().nonnegative(),
  /**
   * Since the host started: branches forks took from the pool, and branches forks of a
   * configuration the pool serves had to launch themselves (a fork the pool cannot serve, or any
   * fork with the pool disabled, counts in neither).
   */
  hits: z.number().int().nonnegative(),
  misses: z.number().int().nonnegative(),
  /** Parked branches found dead or expired and closed instead of handed out. */
  discarded: z.number().int().nonnegative(),
});
export type ForkPoolStats = z.infer<typeof ForkPoolStatsSchema>;
/** The counters of a host without a pool, and the start of a sum over hosts. */
export const NO_POOL_STATS: Readonly<ForkPoolStats> = Object.freeze({ keys: 0, parked: 0, starting: 0, hits: 0, misses: 0, discarded: 0 });

/** The host's own counters (no sandbox): its fork pool's, all zero when it has none. */
export const HostStatsSchema = z.object({ type: z.literal('host.stats'), id: z.number().int() });
export const HostStatsResultSchema = z.object({ type: z.literal('host.stats.result'), id: z.number().int(), forkPool: ForkPoolStatsSchema });

export const SandboxCloseSchema = z.object({ type: z.literal('sandbox.close'), id: z.number().int(), sandboxId: z.string() });
export const SandboxCloseResultSchema = z.object({ type: z.literal('sandbox.close.result'), id: z.number().int() });

/** Every request a host accepts. */
export const HostRequestSchema = z.discriminatedUnion('type', [
  HostHelloSchema,
  HostStatsSchema,
  SandboxCreateSchema,
  SandboxBashSchema,
  SandboxPythonSchema,
  SandboxEditorSchema,
  SandboxReadSchema,
  SandboxWriteSchema,
  SandboxInterruptSchema,
  SandboxResetSchema,
  SandboxCloseSchema,
  SandboxIntegritySchema,
  SandboxForkSchema,
  SandboxForkPrewarmSchema,
]);
export type HostRequest = z.infer<typeof HostRequestSchema>;

// ---- notifications (host → runtime) ----

/** The sandbox's processes died under it; every later call fails with SandboxError. */
export const SandboxLostSchema = z.object({ type: z.literal('sandbox.lost'), sandboxId: z.string(), reason: z.string() });
export type SandboxLost = z.infer<typeof SandboxLostSchema>;

/**
 * The sandbox's shell exited on its own (the model's `exit`, or a command that ended it) with
 * `exitCode`; the sandbox is not lost: its next bash or Python call starts a new shell.
 */
export const SandboxShellExitSchema = z.object({ type: z.literal('sandbox.shellExit'), sandboxId: z.string(), exitCode: z.number().int() });
export type SandboxShellExit = z.infer<typeof SandboxShellExitSchema>;

export type SandboxLimits = z.infer<typeof SandboxLimitsSchema>;
export type SandboxToolSettings = z.infer<typeof SandboxToolSettingsSchema>;
export type SandboxCreate = z.infer<typeof SandboxCreateSchema>;

// ---- the LLM proxy's in-sandbox listener, handed over (host ↔ runtime, on the child IPC channel) ----

/** Host → runtime, with the listening socket as the message's handle: serve it yourself (see src/sandbox/llm-listener-handoff.ts). */
export const LlmListenerOfferSchema = z.object({ type: z.literal('llm-proxy.listener'), seq: z.number().int(), socketPath: z.string().min(1) });
/** Runtime → host: `adopted` true when a proxy of this process serves the listener; the host then stops accepting on it. */
export const LlmListenerReplySchema = z.object({ type: z.literal('llm-proxy.listener.reply'), seq: z.number().int(), adopted: z.boolean() });
export type LlmListenerOffer = z.infer<typeof LlmListenerOfferSchema>;
export type LlmListenerReply = z.infer<typeof LlmListenerReplySchema>;
