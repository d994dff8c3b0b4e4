import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import * as pty from '@lydell/node-pty';
import { SandboxError } from '../errors.js';
import type { BashRequest, BashResult } from './sandbox.js';
import { HINT_BUSY, HINT_IDLE, HINT_NOT_SENT, HINT_TIMEOUT, cleanTerminalOutput, truncateMiddle } from './output.js';

/** Options of a {@link PtySession}. */
export interface PtySessionOptions {
  /** The launch argv (driver + shell); the pty's process. */
  argv: string[];
  cwd: string;
  env: Record<string, string>;
  /** Host directory for command files too long for one terminal line. */
  ctlHostDir: string;
  /** The same directory as seen inside the sandbox. */
  ctlInsideDir: string;
  bashTimeoutMs: number;
  noOutputTimeoutMs: number;
  maxOutputChars: number;
  /** Maps the shell's `$PWD` to what the model sees (host workdir → /workspace). */
  mapCwd?: (cwd: string) => string;
  /**
   * A command of the runtime's own run on the init line, before the first marker (a fork
   * branch's shell-state restore: shell-state.ts), saving a round trip; the first marker carries
   * its `$?`, the session's first {@link PtySession.lastExitCode}.
   */
  firstCommand?: string | undefined;
  /** Called once when the shell exits on its own (not after {@link PtySession.dispose}). */
  onExit?: (info: { exitCode: number; signal?: number | undefined }) => void;
}

const CONTROL: Record<string, string> = { 'C-c': '\x03', 'C-z': '\x1a', 'C-d': '\x04', 'C-\\': '\x1c', 'C-l': '\x0c' };

// The terminal's canonical-mode line buffer holds 4095 bytes; longer commands go through a file.
const MAX_LINE = 3000;
// Raw output kept while a command runs; beyond it the middle is dropped (the model sees a cut
// version anyway), so `yes` for 30 s cannot grow memory without bound.
const RAW_CAP_FACTOR = 20;

/**
 * One persistent bash in a pseudo-terminal: the pty's process is the sandbox launcher, so the
 * pty is the sandboxed shell. The end of a command and its exit code come from a marker the
 * shell prints in PROMPT_COMMAND, carrying a per-session random token (split in two in the
 * definition, so the echoed definition never matches).
 *
 * Guarantees: one command at a time (a second one is refused with the running one's new
 * output); every call returns within its timeout; the raw output kept is bounded.
 */
export class PtySession {
  private readonly term: pty.IPty;
  private readonly token = crypto.randomBytes(8).toString('hex');
  private readonly markerStart: string;
  private raw = '';
  private droppedChars = 0;
  private scanFrom = 0;
  private running = false;
  private ready = false;
  private dead = false;
  private disposed = false;
  private cwd = '/workspace';
  private lastExit: number | null = null;
  /** Output of a command that finished while nobody was waiting. */
  private unreported: { output: string; exitCode: number } | null = null;
  /** Wakes the pending wait at the marker or when the shell dies (output alone only stamps `lastOutputAt`). */
  private waiter: ((ev: 'done' | 'exit') => void) | null = null;
  /** Date.now() of the last output chunk: the no-output deadline is computed from it when due. */
  private lastOutputAt = 0;
  private cmdSeq = 0;
  /** True while an {@link internal} command runs: its output is kept whole. */
  private internalRun = false;

  private constructor(private readonly opts: PtySessionOptions) {
    this.markerStart = `\x1eRR${this.token}:`;
    const [file, ...args] = opts.argv;
    this.term = pty.spawn(file!, args, { name: 'dumb', cols: 500, rows: 50, cwd: opts.cwd, env: opts.env });
    this.term.onData((d) => this.onData(d));
    this.term.onExit((e) => {
      this.dead = true;
      this.waiter?.('exit');
      if (!this.disposed) opts.onExit?.(e);
    });
  }

  /**
   * Spawns the shell and waits for its first marker.
   * @throws SandboxError when the shell exits or does not become ready within `timeoutMs`.
   */
  static async start(opts: PtySessionOptions, timeoutMs: number): Promise<PtySession> {
    const s = new PtySession(opts);
    const half = s.token.length / 2;
    const a = s.token.slice(0, half);
    const b = s.token.slice(half);
    // `stty -echo`: the model must see output, not its command typed back. PS1/PS2 empty: the
    // marker is the only prompt. History off disk.
    const init =
      `stty -echo; unset HISTFILE; PS1=''; PS2=''; PS0=''; ` +
      `PROMPT_COMMAND='__rr_ec=$?; printf "\\036RR%s%s:%s:%s\\037" ${a} ${b} "$__rr_ec" "$PWD"'` +
      (opts.firstCommand ? `; ${opts.firstCommand}\n` : '\n');
    s.term.write(init);
    const ev = await s.waitEvent(timeoutMs, timeoutMs);
    if (ev !== 'done') {
      const tail = cleanTerminalOutput(s.raw).slice(-500);
      s.dispose();
      throw new SandboxError(`sandbox shell did not start (${ev}): ${tail}`, { code: 'SANDBOX_START', stage: 'init' });
    }
    s.ready = true;
    s.unreported = null;
    return s;
  }

  /** Host pid of the pty's process (the launcher: sh → prlimit → driver). */
  get pid(): number {
    return this.term.pid;
  }

  /** True while a command runs. */
  get busy(): boolean {
    return this.running;
  }

  /** True once the shell has exited. */
  get exited(): boolean {
    return this.dead;
  }

  /** The exit code of the last finished command (null before the first, or after a timeout). */
  get lastExitCode(): number | null {
    return this.lastExit;
  }

  /** The model-facing cwd after the last finished command. */
  get currentCwd(): string {
    return this.cwd;
  }

  /**
   * Runs a bash tool call (see the issue's semantics): a command, input to the running one, or
   * an empty command to wait for more output.
   * @throws SandboxError when the shell has exited.
   */
  async exec(req: BashRequest): Promise<BashResult> {
    if (this.dead) throw new SandboxError('the sandbox shell has exited', { code: 'SANDBOX_LOST' });
    const timeoutMs = req.timeoutMs ?? this.opts.bashTimeoutMs;
    const command = req.command;
    if (this.running) {
      if (req.isInput) this.term.write(CONTROL[command.trim()] ?? `${command}\n`);
      else if (command.trim() !== '') return this.result(this.takeOutput(), null, false, HINT_BUSY);
      return this.wait(timeoutMs);
    }
    if (req.isInput || command.trim() === '') {
      if (this.unreported) {
        const u = this.unreported;
        this.unreported = null;
        return this.result(u.output, u.exitCode, false, '');
      }
      return this.result('', this.lastExit, false, req.isInput ? HINT_NOT_SENT : HINT_IDLE);
    }
    this.unreported = null;
    this.raw = '';
    this.droppedChars = 0;
    this.scanFrom = 0;
    this.running = true;
    this.term.write(this.encode(command));
    return this.wait(timeoutMs);
  }

  /**
   * Runs a command of the runtime's own in the shell, between the model's commands (a fork's
   * capture or restore of the shell's state: shell-state.ts), and resolves with its raw
   * terminal output, kept whole. It is not a tool call: the last command's exit code and any
   * output a finished command left unreported are kept for the next call; the shell's `cwd`
   * follows the marker as usual (a restore may change it). The command itself is responsible for
   * leaving no trace in the shell (history, `$?`).
   * @throws SandboxError `SANDBOX_BUSY` while a command runs, `SANDBOX_LOST` when the shell has
   *   exited, `SANDBOX` when the command does not finish in `timeoutMs` (it is interrupted).
   */
  async internal(command: string, timeoutMs: number): Promise<string> {
    if (this.dead) throw new SandboxError('the sandbox shell has exited', { code: 'SANDBOX_LOST' });
    if (this.running) throw new SandboxError('a command is running in the sandbox shell', { code: 'SANDBOX_BUSY' });
    const saved = { unreported: this.unreported, lastExit: this.lastExit };
    this.unreported = null;
    this.raw = '';
    this.droppedChars = 0;
    this.scanFrom = 0;
    this.running = true;
    this.internalRun = true;
    try {
      this.term.write(this.encode(command));
      const ev = await this.waitEvent(timeoutMs, timeoutMs);
      if (ev === 'exit') throw new SandboxError('the sandbox shell exited during an internal command', { code: 'SANDBOX_LOST' });
      if (ev !== 'done') {
        this.interrupt();
        throw new SandboxError(`an internal command of the sandbox shell did not finish in ${timeoutMs} ms`, { code: 'SANDBOX' });
      }
      const out = this.unreported!.output;
      this.unreported = saved.unreported;
      this.lastExit = saved.lastExit;
      return out;
    } finally {
      this.internalRun = false;
    }
  }

  /** Sends Ctrl-C to the foreground job (used when a call is cancelled). */
  interrupt(): void {
    if (!this.dead) this.term.write('\x03');
  }

  /** Kills the pty's process (the launcher) and stops listening. Idempotent. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.waiter?.('exit');
    try {
      this.term.kill('SIGKILL');
    } catch {
      // already gone
    }
  }

  // Every command runs through `eval $'...'` (ANSI-C quoting, no subprocess): a multi-line
  // command then yields exactly one marker, and an unbalanced quote is a syntax error with an
  // exit code instead of a continuation prompt that never ends.
  private encode(command: string): string {
    const quoted = `eval $'${ansiCQuote(command)}'\n`;
    if (Buffer.byteLength(quoted) <= MAX_LINE) return quoted;
    const name = `cmd-${++this.cmdSeq}.sh`;
    fs.writeFileSync(path.join(this.opts.ctlHostDir, name), command);
    return `eval "$(<${shQuote(path.posix.join(this.opts.ctlInsideDir, name))})"\n`;
  }

  private async wait(timeoutMs: number): Promise<BashResult> {
    const ev = await this.waitEvent(timeoutMs, this.opts.noOutputTimeoutMs);
    if (ev === 'done') {
      const u = this.unreported!;
      this.unreported = null;
      return this.result(u.output, u.exitCode, false, '');
    }
    if (ev === 'exit') throw new SandboxError('the sandbox shell exited while a command ran', { code: 'SANDBOX_LOST' });
    return this.result(this.takeOutput(), null, true, HINT_TIMEOUT);
  }

  /**
   * Resolves with 'done' at the marker, 'timeout' at either timeout, 'exit' if the shell dies.
   *
   * Both deadlines are data; one timer per wait fires at the earlier one and re-arms itself if
   * output moved the quiet deadline meanwhile. An output chunk only stamps `lastOutputAt`: no
   * clearTimeout/setTimeout per chunk on the hot path.
   */
  private waitEvent(totalMs: number, quietMs: number): Promise<'done' | 'timeout' | 'exit'> {
    if (this.unreported) return Promise.resolve('done');
    if (this.dead) return Promise.resolve('exit');
    return new Promise((resolve) => {
      const totalAt = Date.now() + totalMs;
      this.lastOutputAt = Date.now();
      let timer: NodeJS.Timeout;
      const finish = (r: 'done' | 'timeout' | 'exit'): void => {
        clearTimeout(timer);
        this.waiter = null;
        resolve(r);
      };
      const check = (): void => {
        const now = Date.now();
        const at = Math.min(totalAt, this.lastOutputAt + quietMs);
        if (now >= at) finish('timeout');
        else timer = setTimeout(check, at - now);
      };
      timer = setTimeout(check, Math.min(totalMs, quietMs));
      this.waiter = (ev) => finish(ev === 'done' ? 'done' : 'exit');
    });
  }

  private onData(d: string): void {
    this.lastOutputAt = Date.now();
    this.raw += d;
    if (!this.internalRun && this.raw.length > this.opts.maxOutputChars * RAW_CAP_FACTOR) this.compact();
    const start = this.raw.indexOf(this.markerStart, this.scanFrom);
    if (start < 0) {
      this.scanFrom = Math.max(0, this.raw.length - this.markerStart.length);
      return;
    }
    const end = this.raw.indexOf('\x1f', start);
    if (end < 0) {
      this.scanFrom = start;
      return;
    }
    const [code, ...cwdParts] = this.raw.slice(start + this.markerStart.length, end).split(':');
    const exitCode = Number(code);
    const cwd = cwdParts.join(':');
    this.cwd = this.opts.mapCwd ? this.opts.mapCwd(cwd) : cwd;
    const output = this.raw.slice(0, start);
    // Anything after the marker is the (empty) prompt: drop it.
    this.raw = '';
    this.scanFrom = 0;
    this.running = false;
    this.lastExit = Number.isFinite(exitCode) ? exitCode : null;
    this.unreported = { output: this.withDropNote(output), exitCode: this.lastExit ?? -1 };
    this.droppedChars = 0;
    this.waiter?.('done');
  }

  private compact(): void {
    const keep = this.opts.maxOutputChars * (RAW_CAP_FACTOR / 2);
    const head = this.raw.slice(0, keep / 2);
    const tail = this.raw.slice(-keep / 2);
    this.droppedChars += this.raw.length - head.length - tail.length;
    this.raw = head + '\x00' + tail; // NUL marks the gap; removed when cleaning
    this.scanFrom = Math.max(0, this.raw.length - tail.length);
  }

  private withDropNote(s: string): string {
    return this.droppedChars ? s.replace('\x00', `\n[... ${this.droppedChars} characters dropped while the command ran ...]\n`) : s;
  }

  /** Output since the last report, consumed. */
  private takeOutput(): string {
    // Hold back only what may be the start of a marker that the next chunk completes.
    const rs = this.raw.lastIndexOf('\x1e');
    const cut = rs >= 0 && rs >= this.raw.length - this.markerStart.length - 200 && this.markerStart.startsWith(this.raw.slice(rs, rs + this.markerStart.length)) ? rs : this.raw.length;
    const out = this.raw.slice(0, cut);
    this.raw = this.raw.slice(cut);
    this.scanFrom = 0;
    const text = this.withDropNote(out);
    this.droppedChars = 0;
    return text;
  }

  private result(rawOutput: string, exitCode: number | null, timedOut: boolean, hint: string): BashResult {
    const cleaned = cleanTerminalOutput(rawOutput);
    const { text, truncated } = truncateMiddle(cleaned, this.opts.maxOutputChars);
    return { output: text + hint, exitCode, cwd: this.cwd, timedOut, truncated };
  }
}

/** Quotes for bash's `$'...'`: backslash, single quote and control bytes escaped. */
export function ansiCQuote(s: string): string {
  // eslint-disable-next-line no-control-regex
  return s.replace(/[\\'\x00-\x1f\x7f]/g, (c) => {
    if (c === '\\') return '\\\\';
    if (c === "'") return "\\'";
    if (c === '\n') return '\\n';
    if (c === '\t') return '\\t';
    return `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`;
  });
}

function shQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}
