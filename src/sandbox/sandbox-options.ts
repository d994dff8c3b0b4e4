import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { ValidationError } from '../errors.js';
import { defaultImageStoreDir } from './images/image-store.js';

const uid = typeof process.getuid === 'function' ? process.getuid() : 0;

/**
 * Options of {@link import('./sandbox-provider.js').createSandboxProvider}. Parsed once with
 * defaults and frozen.
 */
export const SandboxOptionsSchema = z.object({
  /** Isolation driver; `auto` picks bwrap, then unshare, then none (see drivers.ts). */
  driver: z.enum(['auto', 'bwrap', 'unshare', 'none']).default('auto'),
  /** Sandbox-host processes to spread sandboxes over; started lazily. Default: CPU count. */
  hosts: z.number().int().positive().default(() => os.availableParallelism()),
  /** Leases, workdirs and host sockets live here. Default `os.tmpdir()/rollout-runtime-<uid>`. */
  stateDir: z.string().default(() => path.join(os.tmpdir(), `rollout-runtime-${uid}`)),
  /** Root filesystem for bwrap (e.g. built by scripts/make-rootfs.sh); null = the host's, read-only. */
  rootfs: z.string().nullable().default(null),
  /** The image store `spec.image` is resolved in (see docs/images.md). Default `ROLLOUT_IMAGE_STORE`, else the XDG cache dir. */
  imageStore: z.string().default(() => defaultImageStoreDir()),
  /** Warm pools: image name → sandboxes kept started for it (see src/sandbox/warm-pool.ts). Default none. */
  warmPools: z.record(z.string(), z.number().int().min(0).max(1000)).default({}),
  /** A warm pool with no take for this long is drained (its sandboxes closed) until the next take. */
  warmPoolIdleMs: z.number().int().positive().default(300_000),
  /** Identifies this runtime in leases; default `<hostname>-<pid>`. */
  runtimeId: z.string().default(() => `${os.hostname()}-${process.pid}`),
  /**
   * Per-sandbox limits. Totals (processes, memory, disk) hold for the sandbox as a whole, however
   * many processes it starts; the rlimits hold per process. See docs/sandboxes.md, "Security".
   */
  limits: z
    .object({
      /** Processes and threads at once in the whole sandbox: cgroup `pids.max` (RLIMIT_NPROC without a cgroup). */
      maxProcesses: z.number().int().positive().default(256),
      /** Address space per process (RLIMIT_AS), bytes. */
      memoryBytes: z.number().int().positive().default(4 * 1024 ** 3),
      /** Largest file one process may write (RLIMIT_FSIZE), bytes. */
      fileSizeBytes: z.number().int().positive().default(1024 ** 3),
      /** CPU time per process (RLIMIT_CPU), seconds. */
      cpuSeconds: z.number().int().positive().default(3600),
      /**
       * Memory of the whole sandbox: cgroup v1 `memory.limit_in_bytes` (and `memsw` when swap is
       * accounted). Pages the sandbox writes to its tmpfs /tmp, /dev/shm and /workspace count
       * too. Past it the kernel's OOM killer picks a process of this sandbox only. Needs root
       * and the memory controller; without them only the per-process `memoryBytes` holds.
       */
      totalMemoryBytes: z.number().int().positive().default(4 * 1024 ** 3),
      /** Size of the private /tmp and of /dev/shm (each a tmpfs), bytes: a write past it fails with ENOSPC. */
      tmpBytes: z.number().int().positive().default(1024 ** 3),
      /**
       * Size of the tmpfs holding /workspace (with the control files and the unshare driver's
       * home), bytes: a write past it fails with ENOSPC. RAM-backed: seeded files count against
       * the host's memory, files the sandbox writes against `totalMemoryBytes` as well. Needs
       * root (a mount); without it the workdir is a plain directory of the state dir, uncapped.
       */
      workdirBytes: z.number().int().positive().default(4 * 1024 ** 3),
    })
    .prefault({}),
  /**
   * Host uids (and gids) sandboxed processes run as when the runtime is root: sandbox `<id>`
   * gets `base + hash(id) % count`. Pick a range no host user or subordinate-id range uses. The
   * same number is used as uid and gid. Not used when the runtime is not root (its own uid is
   * already unprivileged).
   */
  sandboxUids: z
    .object({
      base: z.number().int().min(1000).max(0xfffffffe).default(2_000_000_000),
      count: z.number().int().positive().max(1 << 30).default(1_000_000),
    })
    .prefault({})
    .refine((r) => r.base + r.count <= 0xfffffffe, { message: 'base + count must stay below 4294967294' }),
  timeouts: z
    .object({
      /** Per bash command (ProRL: 30 s). */
      bashMs: z.number().int().positive().default(30_000),
      /** No new output for this long also ends the wait (ProRL: 30 s). */
      noOutputMs: z.number().int().positive().default(30_000),
      /** Per Python cell (ProRL: 120 s). */
      pythonMs: z.number().int().positive().default(120_000),
      /** Sandbox start, including seeding and setup commands (ProRL: 120 s). */
      startMs: z.number().int().positive().default(120_000),
      /** Host process start (spawn to listening). */
      hostStartMs: z.number().int().positive().default(15_000),
    })
    .prefault({}),
  /**
   * Each host's pool of fork branches launched ahead of a fork (#26, fork-pool.ts): after a fork
   * of a host-root bwrap sandbox, `size` branches of its configuration (its uid, limits, env) wait
   * at their gates, so the next fork of it or of one of its branches takes them instead of
   * launching its own; closed after `idleMs` without such a fork. `size` 0 disables it.
   */
  forkPool: z
    .object({
      size: z.number().int().min(0).max(64).default(4),
      idleMs: z.number().int().positive().default(60_000),
    })
    .prefault({}),
  /** Bash output longer than this is cut (head / ~80% slice / tail). */
  maxOutputChars: z.number().int().positive().default(10_000),
  /** Largest IPC frame either side accepts. */
  maxFrameBytes: z.number().int().positive().default(64 * 1024 * 1024),
});

/** Parsed, defaulted sandbox options. */
export type SandboxOptions = Readonly<z.infer<typeof SandboxOptionsSchema>>;
/** What callers pass: every field optional. */
export type SandboxOptionsInput = z.input<typeof SandboxOptionsSchema>;

/**
 * Parses and freezes sandbox options.
 * @throws ValidationError naming the bad field.
 */
export function parseSandboxOptions(input: SandboxOptionsInput = {}): SandboxOptions {
  const r = SandboxOptionsSchema.safeParse(input);
  if (!r.success) {
    const issues = r.error.issues.map((i) => ({ path: i.path.join('.'), message: i.message }));
    throw new ValidationError(`invalid sandbox options: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`, issues);
  }
  return Object.freeze(r.data);
}
