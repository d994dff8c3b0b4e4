import { CancelledError, SandboxError } from '../errors.js';
import { abortReason, sleep, systemClock, type Clock } from '../clock.js';
import type { BashRequest, BashResult, EditorRequest, EditorResult, PythonResult, Sandbox, SandboxFork, SandboxForkRequest, SandboxProvider, SandboxSpec } from '../sandbox/sandbox.js';

/** Which sandbox operation a fault or latency applies to. */
export type MemorySandboxOp = 'create' | 'bash' | 'python' | 'editor' | 'fork';

/** Options of {@link MemorySandboxProvider}. */
export interface MemorySandboxOptions {
  /** Clock the latencies are measured on (a ManualClock in tests). */
  clock?: Clock | undefined;
  /** Latency per operation in ms: a number, or a function of the op (e.g. random in property tests). */
  latencyMs?: number | ((op: MemorySandboxOp) => number) | undefined;
  /**
   * Fault injection: return an error to throw it from that op (e.g. a SandboxError), a
   * `'hang'` to never answer (until the signal aborts), or undefined to proceed.
   * `n` counts calls of that op across the provider, from 1.
   */
  fail?: ((op: MemorySandboxOp, n: number) => Error | 'hang' | undefined) | undefined;
  /** False: `fork` throws SandboxError `FREEZE_UNAVAILABLE`, as a host without a freezer controller. Default true. */
  canFreeze?: boolean | undefined;
  /** What each fork reports as not carried to its branches (`SandboxFork.lost`). Default none. */
  forkLost?: string[] | undefined;
}

/**
 * An in-memory {@link SandboxProvider} for tests and benchmarks. Files live in a Map; `bash`
 * understands `echo` (with `>`), `cat`, `ls`, `pwd`, `true`, `false`, `exit N`, `sleep N`
 * (on the clock), `NAME=value` / `export NAME=value` and `$NAME` (its variables, which a
 * {@link MemorySandbox.fork} copies with the files); anything else answers `command not found` (exit 127). `python` echoes the
 * code's `print(...)` arguments. The editor implements the OpenHands commands on the Map.
 * Counters let tests assert no sandbox leaks.
 */
export class MemorySandboxProvider implements SandboxProvider {
  /** Sandboxes made and not yet closed. */
  live = 0;
  created = 0;
  closedCount = 0;
  readonly sandboxes = new Map<string, MemorySandbox>();
  /** Whether {@link close} was called. */
  closed = false;
  readonly clock: Clock;
  private readonly opts: MemorySandboxOptions;
  private readonly calls: Record<MemorySandboxOp, number> = { create: 0, bash: 0, python: 0, editor: 0, fork: 0 };
  /** Forks made (each counts once, whatever its width). */
  forks = 0;

  constructor(opts: MemorySandboxOptions = {}) {
    this.opts = opts;
    this.clock = opts.clock ?? systemClock;
  }

  async create(spec: SandboxSpec, opts: { rolloutId: string; signal?: AbortSignal | undefined }): Promise<MemorySandbox> {
    if (this.closed) throw new SandboxError('sandbox provider is closed', { code: 'PROVIDER_CLOSED' });
    await this.gate('create', opts.signal);
    const sb = new MemorySandbox(`mem-${++this.created}`, opts.rolloutId, spec, this);
    this.live++;
    this.sandboxes.set(sb.id, sb);
    return sb;
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.sandboxes.values()].map((s) => s.close()));
  }

  /** @internal Applies latency and injected faults for one op. */
  async gate(op: MemorySandboxOp, signal: AbortSignal | undefined): Promise<void> {
    const n = ++this.calls[op];
    const fault = this.opts.fail?.(op, n);
    const lat = typeof this.opts.latencyMs === 'function' ? this.opts.latencyMs(op) : (this.opts.latencyMs ?? 0);
    if (lat > 0) await sleep(this.clock, lat, signal);
    else if (signal?.aborted) throw abortReason(signal);
    if (fault === 'hang') {
      await new Promise<never>((_, reject) => {
        if (!signal) return;
        signal.addEventListener('abort', () => reject(abortReason(signal)), { once: true });
      });
    }
    if (fault) throw fault;
  }

  /** @internal Forks `parent` into one branch sandbox per rollout id (a copy of its files). */
  async forkOf(parent: MemorySandbox, req: SandboxForkRequest, signal: AbortSignal | undefined): Promise<SandboxFork> {
    if (this.closed) throw new SandboxError('sandbox provider is closed', { code: 'PROVIDER_CLOSED' });
    await this.gate('fork', signal);
    if (this.opts.canFreeze === false) throw new SandboxError(`sandbox ${parent.id} cannot be frozen: no freezer here`, { code: 'FREEZE_UNAVAILABLE' });
    this.forks++;
    const files = Object.fromEntries(parent.files);
    const branches = req.rolloutIds.map((rid) => {
      const sb = new MemorySandbox(`mem-${++this.created}`, rid, { files }, this);
      sb.vars = new Map(parent.vars);
      this.live++;
      this.sandboxes.set(sb.id, sb);
      return sb;
    });
    let copiedBytes = 0;
    for (const v of parent.files.values()) copiedBytes += Buffer.byteLength(v);
    if (req.keepParent === false) {
      await parent.close();
      copiedBytes = 0;
    }
    return { branches, lost: [...(this.opts.forkLost ?? [])], frozenMs: 0, copiedBytes };
  }

  /** @internal */
  onClosed(sb: MemorySandbox): void {
    this.live--;
    this.closedCount++;
    this.sandboxes.delete(sb.id);
  }
}

/** One in-memory sandbox. */
export class MemorySandbox implements Sandbox {
  readonly files = new Map<string, string>();
  readonly history: string[] = [];
  closed = false;
  /** Shell variables (`export NAME=value`, `NAME=value`; read by `echo $NAME`), carried across a fork. */
  vars = new Map<string, string>();
  private readonly undo = new Map<string, string[]>();

  constructor(
    readonly id: string,
    readonly rolloutId: string,
    spec: SandboxSpec,
    private readonly provider: MemorySandboxProvider,
  ) {
    for (const [k, v] of Object.entries(spec.files ?? {})) this.files.set(norm(k), v);
  }

  async bash(req: BashRequest, signal?: AbortSignal): Promise<BashResult> {
    this.check();
    await this.provider.gate('bash', signal);
    this.history.push(req.command);
    const { output, exitCode } = await this.run(req.command.trim(), signal);
    return { output, exitCode, cwd: '/workspace', timedOut: false, truncated: false };
  }

  async python(code: string, _opts?: { timeoutMs?: number }, signal?: AbortSignal): Promise<PythonResult> {
    this.check();
    await this.provider.gate('python', signal);
    const prints = [...code.matchAll(/print\((['"])(.*?)\1\)/g)].map((m) => m[2]);
    return { output: prints.length ? prints.join('\n') + '\n' : '', error: null, timedOut: false };
  }

  async editor(req: EditorRequest, signal?: AbortSignal): Promise<EditorResult> {
    this.check();
    await this.provider.gate('editor', signal);
    const path = norm(req.path);
    const cur = this.files.get(path);
    const push = (prev: string | undefined): void => {
      const h = this.undo.get(path) ?? [];
      h.push(prev ?? '');
      this.undo.set(path, h);
    };
    switch (req.command) {
      case 'view': {
        if (cur === undefined) return { output: `The path ${req.path} does not exist.`, error: true };
        let lines = cur.split('\n');
        const start = req.view_range ? req.view_range[0] : 1;
        if (req.view_range) lines = lines.slice(req.view_range[0] - 1, req.view_range[1] === -1 ? undefined : req.view_range[1]);
        return { output: lines.map((l, i) => `${String(i + start).padStart(6)}\t${l}`).join('\n'), error: false };
      }
      case 'create':
        if (cur !== undefined) return { output: `File already exists at: ${req.path}. Cannot overwrite files using command \`create\`.`, error: true };
        push(undefined);
        this.files.set(path, req.file_text);
        return { output: `File created successfully at: ${req.path}`, error: false };
      case 'str_replace': {
        if (cur === undefined) return { output: `The path ${req.path} does not exist.`, error: true };
        const count = cur.split(req.old_str).length - 1;
        if (count === 0) return { output: `No replacement was performed, old_str \`${req.old_str}\` did not appear verbatim in ${req.path}.`, error: true };
        if (count > 1) return { output: `No replacement was performed. Multiple occurrences of old_str \`${req.old_str}\`.`, error: true };
        push(cur);
        this.files.set(path, cur.replace(req.old_str, req.new_str ?? ''));
        return { output: `The file ${req.path} has been edited.`, error: false };
      }
      case 'insert': {
        if (cur === undefined) return { output: `The path ${req.path} does not exist.`, error: true };
        const lines = cur.split('\n');
        if (req.insert_line < 0 || req.insert_line > lines.length) return { output: `Invalid insert_line ${req.insert_line}`, error: true };
        push(cur);
        lines.splice(req.insert_line, 0, ...req.new_str.split('\n'));
        this.files.set(path, lines.join('\n'));
        return { output: `The file ${req.path} has been edited.`, error: false };
      }
      case 'undo_edit': {
        const h = this.undo.get(path);
        if (!h?.length) return { output: `No edit history found for ${req.path}.`, error: true };
        this.files.set(path, h.pop()!);
        return { output: `Last edit to ${req.path} undone successfully.`, error: false };
      }
    }
  }

  async readFile(path: string): Promise<string> {
    this.check();
    const v = this.files.get(norm(path));
    if (v === undefined) throw new SandboxError(`no such file: ${path}`, { code: 'ENOENT' });
    return v;
  }

  async writeFile(path: string, content: string): Promise<void> {
    this.check();
    this.files.set(norm(path), content);
  }

  /** No shell here: a reset only counts (`resets`). */
  async resetShell(): Promise<void> {
    this.check();
    this.resets++;
  }

  /** Fresh shells asked for ({@link resetShell}). */
  resets = 0;

  /** No processes here: nothing to signal. */
  async signalProcesses(): Promise<number> {
    this.check();
    return 0;
  }

  /** A copy of this sandbox per rollout id (files and variables), as {@link Sandbox.fork}. */
  async fork(req: SandboxForkRequest, signal?: AbortSignal): Promise<SandboxFork> {
    this.check();
    return this.provider.forkOf(this, req, signal);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.provider.onClosed(this);
  }

  private check(): void {
    if (this.closed) throw new SandboxError(`sandbox ${this.id} is closed`, { code: 'SANDBOX_CLOSED' });
  }

  private async run(raw: string, signal: AbortSignal | undefined): Promise<{ output: string; exitCode: number }> {
    const assign = /^(?:export\s+)?([A-Za-z_]\w*)=(\S*)$/.exec(raw);
    if (assign) {
      this.vars.set(assign[1]!, unquote(assign[2]!));
      return { output: '', exitCode: 0 };
    }
    const cmd = raw.replace(/\$([A-Za-z_]\w*)/g, (_, k: string) => this.vars.get(k) ?? '');
    const redirect = /^echo\s+(.*?)\s*>\s*(\S+)$/.exec(cmd);
    if (redirect) {
      this.files.set(norm(redirect[2]!), unquote(redirect[1]!) + '\n');
      return { output: '', exitCode: 0 };
    }
    const [head = '', ...rest] = cmd.split(/\s+/);
    const arg = rest.join(' ');
    switch (head) {
      case '':
      case 'true':
        return { output: '', exitCode: 0 };
      case 'false':
        return { output: '', exitCode: 1 };
      case 'exit':
        return { output: '', exitCode: Number(arg) || 0 };
      case 'echo':
        return { output: unquote(arg) + '\n', exitCode: 0 };
      case 'pwd':
        return { output: '/workspace\n', exitCode: 0 };
      case 'ls':
        return { output: [...this.files.keys()].sort().join('\n') + (this.files.size ? '\n' : ''), exitCode: 0 };
      case 'cat': {
        const v = this.files.get(norm(arg));
        return v === undefined ? { output: `cat: ${arg}: No such file or directory\n`, exitCode: 1 } : { output: v, exitCode: 0 };
      }
      case 'sleep':
        await sleep(this.provider.clock, (Number(arg) || 0) * 1000, signal).catch((e: unknown) => {
          throw e instanceof Error && e.name === 'AbortError' ? new CancelledError(e.message) : e;
        });
        return { output: '', exitCode: 0 };
      default:
        return { output: `bash: ${head}: command not found\n`, exitCode: 127 };
    }
  }
}

function norm(p: string): string {
  return p.replace(/^\/workspace\//, '').replace(/^\.\//, '');
}

function unquote(s: string): string {
  const m = /^(['"])(.*)\1$/.exec(s);
  return m ? m[2]! : s;
}
