/**
 * The runtime-side view of a sandbox: what handlers and the agent loop call. The real
 * implementation talks to a sandbox-host process over a msgpack Unix-socket channel
 * (`sandbox-client.ts`); `src/testing/memory-sandbox.ts` is the in-process fake.
 *
 * Every method throws {@link import('../errors.js').SandboxError} when the sandbox is lost or
 * the host is gone (an infra fault, retried), and honours its `signal` by interrupting the
 * running command and rejecting with a CancelledError.
 */

/** What a sandbox is made from. */
export interface SandboxSpec {
  /** Files to write into `/workspace` before anything runs: relative path → content. */
  files?: Record<string, string> | undefined;
  /** A host directory copied (never shared) into `/workspace`. */
  seedDir?: string | undefined;
  /** A git repository (path or URL reachable without network: a local path) cloned into `/workspace`. */
  gitRepo?: string | undefined;
  /** Shell commands run in `/workspace` once the sandbox is up; a non-zero exit is a TaskError. */
  setup?: string[] | undefined;
  /** Network access; off by default. */
  network?: boolean | undefined;
  /** Environment variables for the shell. */
  env?: Record<string, string> | undefined;
  /**
   * An image of the image store (a name given at import, or a digest): the sandbox's root is a
   * copy-on-write overlay of its layers, its config's Env and WorkingDir apply. Absent: the
   * host's root, read-only. An image the store lacks is a TaskError (`IMAGE_NOT_FOUND`).
   */
  image?: string | undefined;
  /**
   * A per-rollout OpenAI-compatible proxy on the host (`socketPath`, a Unix socket where its HTTP
   * server listens). The sandbox, still without any other network, gets a loopback listener
   * `127.0.0.1:18400` forwarding to it, `OPENAI_BASE_URL=http://127.0.0.1:18400/v1` and
   * `OPENAI_API_KEY=<token>` in every process, and the socket itself at /run/rollout/llm.sock.
   * See llm-proxy-forwarder.ts.
   */
  llmProxy?: { socketPath: string; token: string } | undefined;
  /**
   * The host's harness store (an absolute directory): shown read-only at /run/rollout/harness,
   * with this runtime's Node binary at /run/rollout/harness-node/node (harness-mount.ts). Agent
   * CLIs run from it; nothing is downloaded in the sandbox.
   */
  harnessStore?: string | undefined;
}

export interface BashRequest {
  /** The command; empty means "wait for more output of the running one". */
  command: string;
  /** Send `command` as input to the running process (or `C-c`, `C-z`, `C-d`). */
  isInput?: boolean | undefined;
  /** Per-command timeout in ms (default: the sandbox's, 30 s). */
  timeoutMs?: number | undefined;
}

export interface BashResult {
  /** Output with ANSI sequences stripped, truncated in the middle when long. */
  output: string;
  /** The exit code, or null when the command is still running (timeout / no new output). */
  exitCode: number | null;
  /** The shell's working directory after the command. */
  cwd: string;
  /** True when the command did not finish in time; the model may wait, send input or interrupt. */
  timedOut: boolean;
  /** True when output was cut. */
  truncated: boolean;
}

export interface PythonResult {
  /** stdout + stderr of the cell, then the repr of a final expression. */
  output: string;
  /** The traceback when the cell raised. */
  error: string | null;
  timedOut: boolean;
}

export type EditorRequest =
  | { command: 'view'; path: string; view_range?: [number, number] | undefined }
  | { command: 'create'; path: string; file_text: string }
  | { command: 'str_replace'; path: string; old_str: string; new_str?: string | undefined }
  | { command: 'insert'; path: string; insert_line: number; new_str: string }
  | { command: 'undo_edit'; path: string };

export interface EditorResult {
  output: string;
  /** True when the edit was refused (no match, several matches, path outside the workspace...). */
  error: boolean;
}

export interface Sandbox {
  readonly id: string;
  /** `OPENAI_BASE_URL` as seen inside the sandbox when it was made with `llmProxy`, else undefined. */
  readonly llmProxyUrl?: string | undefined;
  bash(req: BashRequest, signal?: AbortSignal): Promise<BashResult>;
  python(code: string, opts?: { timeoutMs?: number }, signal?: AbortSignal): Promise<PythonResult>;
  editor(req: EditorRequest, signal?: AbortSignal): Promise<EditorResult>;
  /** Reads a file of the workspace (relative path). */
  readFile(path: string): Promise<string>;
  /** Writes a file of the workspace (relative path), creating directories. */
  writeFile(path: string, content: string): Promise<void>;
  /**
   * Signals every process of the sandbox but its shell (and Python REPL): the running command,
   * its background jobs, and daemons that left its process group or session. `SIGKILL` is a
   * sweep that resolves once none of them is alive (forks are held off meanwhile, where the
   * sandbox has a cgroup); `SIGINT` is sent once. Resolves with how many were signalled.
   * Optional: a sandbox without processes of its own (a test double) has nothing to signal.
   * @throws SandboxError when the sandbox is lost or closed.
   */
  signalProcesses?(signal: 'SIGINT' | 'SIGKILL'): Promise<number>;
  /**
   * Ends every process of the sandbox, its shell and REPL included, and starts a fresh shell on
   * the same root and workspace (shell state, /tmp and processes are not carried over, nor the
   * LLM proxy's listener of a `llmProxy` sandbox: a reset is for an eval, after the loop). The
   * shell and harness families call it before their eval: in the policy's own shell a function,
   * alias or PROMPT_COMMAND it defined would answer the eval's commands (reward hacking).
   * Optional: a sandbox without a shell of its own (a test double) has nothing to reset.
   * @throws SandboxError when the sandbox is lost or closed, or the new shell does not start.
   */
  resetShell?(): Promise<void>;
  /**
   * The reward-hack monitor's file observation (#27, src/sandbox/integrity/): `start` takes the
   * workspace's baseline with the `protect` globs, `observe` reports the violations since the
   * last scan at `turn`. Optional: a sandbox without one (a test double) runs the monitor degraded.
   * @throws SandboxError when the sandbox is lost or closed.
   */
  integrity?(req: { op: 'start'; protect: string[]; secret?: string[] } | { op: 'observe'; turn: number }): Promise<import('../protocol/integrity.js').FileObservationResult>;
  /**
   * Tree rollouts (#26): forks this sandbox at a turn boundary into `n` branch sandboxes. Its
   * processes are frozen (cgroup freezer) while the filesystem is captured copy-on-write and the
   * shell's state (cwd, exported and shell variables, functions, aliases, umask, shell options)
   * is read; then it is thawed (or, with `keepParent: false`, closed: its filesystem becomes the
   * branches' lower layer without a copy). Each branch is a full {@link Sandbox} of its own (its
   * own id, cgroup, shell and lease; `close()` ends it), started from the snapshot with the shell
   * state restored. The snapshot is removed with its last branch (and by the start-up reap).
   * Call it only between commands (at a turn boundary); a command running in the shell is a
   * SandboxError `SANDBOX_BUSY`. Branches are made on the parent's sandbox host, keep the
   * parent's uid (the files are its), get no seed or setup, and no LLM proxy but the one
   * `llmProxies` gives them. With `keepParent: false` this sandbox is closed when the call
   * returns (its calls then fail with SANDBOX_LOST). A branch can itself be forked (a tree):
   * its snapshot stacks on its own. docs/sandboxes.md, "Forks".
   * Optional: a sandbox that cannot fork has none (the runtime answers a typed error).
   * @throws SandboxError `FREEZE_UNAVAILABLE` (no freezer controller, or the `none` driver) or
   *   `FORK_FAILED`, with this sandbox untouched and no branch left; CancelledError on `signal`.
   */
  fork?(req: SandboxForkRequest, signal?: AbortSignal): Promise<SandboxFork>;
  /**
   * Tree rollouts (#26): asks this sandbox's host to park up to `n` fork branches of its
   * configuration (shells started, waiting at their gates) ahead of its first fork, which then
   * takes them instead of launching its own (a warm fork). Resolves at once with how many are
   * parked or starting for it, the launches going on in the background; 0 when its forks cannot
   * use them (an image sandbox, the unshare driver, the host's fork pool disabled, an LLM-proxied
   * sandbox) or the host already pools 4 other prewarmed configurations awaiting their first
   * forks (fork-pool.ts `prewarm`). Nothing of this sandbox changes;
   * the parked branches are the host's, closed when unused (docs/sandboxes.md, "Forks").
   * Optional: a sandbox that cannot fork has none.
   * @throws SandboxError when the sandbox is lost or closed.
   */
  prewarmFork?(n: number): Promise<number>;
  /**
   * Calls `listener` each time the sandbox's shell exits on its own (the model's `exit`, or a
   * command that ended the shell), with the shell's exit code, and returns what unsubscribes it.
   * The sandbox is not lost: its next bash or Python call starts a new shell (a kill of the
   * shell is a loss instead, and calls fail). A listener may be told after the call whose
   * command ended the shell has returned (a command that outlived its call's timeout).
   * Optional: a sandbox without a shell of its own (a test double) has none.
   */
  onShellExit?(listener: (exit: { exitCode: number }) => void): () => void;
  /** Kills every process of the sandbox and removes its workdir. Idempotent; never throws. */
  close(): Promise<void>;
}

/** What {@link Sandbox.fork} is asked. */
export interface SandboxForkRequest {
  /** One rollout id per branch (the branch sandboxes' leases name them); its length is the fork's width. */
  rolloutIds: string[];
  /** False: the parent sandbox ends at the fork (closed by the fork) and its files are shared without a copy. Default true. */
  keepParent?: boolean | undefined;
  /**
   * A branch's own LLM proxy, by position in `rolloutIds` (as `SandboxSpec.llmProxy`): a branch
   * never inherits its parent's (its socket and token are the parent rollout's). Absent or
   * undefined for a branch: it has none.
   */
  llmProxies?: Array<{ socketPath: string; token: string } | undefined> | undefined;
}

/** What {@link Sandbox.fork} gives back. */
export interface SandboxFork {
  /** The branch sandboxes, in the order of `rolloutIds`, each ready for its first command. */
  branches: Sandbox[];
  /**
   * What the branches did not get from the parent, in words for the policy's first observation
   * (e.g. `2 background processes (sleep, python3)`, `the Python REPL's state (…)`, `3 entries
   * in /tmp (…)`); empty when nothing was lost.
   */
  lost: string[];
  /** How long the parent's processes were frozen, ms. */
  frozenMs: number;
  /** Bytes copied to make the snapshot (0 when the parent's files were shared without a copy). */
  copiedBytes: number;
}

/** Makes sandboxes. One per runtime. */
export interface SandboxProvider {
  /** Starts a sandbox for a rollout. Throws SandboxError (retried) or TaskError (bad spec). */
  create(spec: SandboxSpec, opts: { rolloutId: string; signal?: AbortSignal | undefined }): Promise<Sandbox>;
  /** Closes every sandbox it made and its host processes. */
  close(): Promise<void>;
  /**
   * Its hosts' fork pools (#26) summed: parked and starting branches now, and the forks' takes
   * (hits, misses) and discards since each host started. Absent: a provider without fork pools.
   */
  forkPoolStats?(): Promise<import('../protocol/sandbox.js').ForkPoolStats>;
}
