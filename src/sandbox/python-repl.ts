import { spawn, type ChildProcess } from 'node:child_process';
import readline from 'node:readline';
import { SandboxError } from '../errors.js';
import type { PythonResult } from './sandbox.js';
import { truncateMiddle } from './output.js';
import { PY_SECCOMP_LOADER } from './seccomp.js';

/**
 * How the REPL's interpreter is started: `-I` (isolated: no PYTHON* variables, no user site, no
 * script or working directory on `sys.path`) and `-S` (no `site` at start-up: no `.pth` file and no
 * `sitecustomize` runs), so nothing the sandbox user can write — a `.pth` file in its writable
 * home's `~/.local/lib/python3.N/site-packages`, `PYTHONPATH`, `PYTHONSTARTUP` — runs before the
 * driver has installed its
 * seccomp filter (issue #28 §5.4: a `.pth` ran `unshare` and `mount` with `Seccomp: 0`). The driver
 * then does what `site` would have, filtered: see {@link REPL_DRIVER}. `-u`: unbuffered protocol.
 */
export const REPL_PYTHON_FLAGS: readonly string[] = Object.freeze(['-I', '-S', '-u']);

/**
 * The driver the REPL process runs (started with {@link REPL_PYTHON_FLAGS}): JSON lines in on a
 * private dup of stdin, JSON lines out on a private dup of stdout. Cell output (print, sys.stderr,
 * and subprocesses writing to fds 1/2) goes to an unlinked temp file that is read back after each
 * cell. A timeout is an ITIMER_REAL alarm raising KeyboardInterrupt inside the cell, so the REPL and
 * its state survive.
 * Arguments: the working directory, then the seccomp filter to install on itself first ('' for
 * none): the REPL is entered with nsenter, where no bwrap loads a filter for it; then the
 * sandbox's PATH for the cells ('' to keep the one it started with, which is the trusted one).
 *
 * Order matters (issue #28 §5.4, §5.5): the filter first, with only the interpreter's own standard
 * library imported; then `{"ready": true}`; only then anything the sandbox user controls — the
 * working directory, `PYTHONPATH`, the user and system site directories and their `.pth` files,
 * `sitecustomize`/`usercustomize` — each under the filter. Whatever of theirs fails after `ready`
 * (a `.pth` calling `os._exit`, an unreadable workspace) is the policy's doing and reaches it as a
 * cell's output ("the Python REPL exited"), never as a REPL that did not start (an infra error).
 */
export const REPL_DRIVER = `${PY_SECCOMP_LOADER}${String.raw`
import sys, os, json, ast, traceback, signal, tempfile
# argv[2]: the sandbox's seccomp filter, installed before any cell can run (fails closed).
if len(sys.argv) > 2 and sys.argv[2]:
    _rollout_seccomp(sys.argv[2])
if len(sys.argv) > 3 and sys.argv[3]:
    os.environ['PATH'] = sys.argv[3]
proto_in = os.fdopen(os.dup(0), 'rb')
proto_out = os.fdopen(os.dup(1), 'wb', buffering=0)
proto_out.write(b'{"ready": true}\n')
devnull = os.open(os.devnull, os.O_RDONLY)
os.dup2(devnull, 0)
cap = tempfile.TemporaryFile(buffering=0)
os.dup2(cap.fileno(), 1)
os.dup2(cap.fileno(), 2)
sys.stdout = open(1, 'w', buffering=1, closefd=False, errors='replace')
sys.stderr = sys.stdout
sys.stdin = open(0, 'r', closefd=False)
def _rollout_site():
    # What -I -S left out, now under the filter: PYTHONPATH first (as the interpreter puts it),
    # then site (user site included, as a plain python3 has it), then PYTHONDONTWRITEBYTECODE.
    # What fails here shows in the first cell's output; the REPL goes on.
    try:
        if len(sys.argv) > 1:
            os.chdir(sys.argv[1])
    except OSError as e:
        print('python: cannot enter the working directory: %s' % e)
    extra = [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]
    sys.path[0:0] = extra + ['']
    if os.environ.get('PYTHONDONTWRITEBYTECODE'):
        sys.dont_write_bytecode = True
    try:
        import site
        site.ENABLE_USER_SITE = True
        site.main()
    except BaseException:
        traceback.print_exc()
_rollout_site()
del _rollout_site
state = {'alarm': False}
def on_alarm(signum, frame):
    state['alarm'] = True
    raise KeyboardInterrupt('cell timed out')
signal.signal(signal.SIGALRM, on_alarm)
ns = {'__name__': '__main__', '__builtins__': __builtins__}
def run(code, timeout):
    value = None
    tree = ast.parse(code, '<cell>', 'exec')
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        exec(compile(tree, '<cell>', 'exec'), ns)
        if last is not None:
            v = eval(compile(last, '<cell>', 'eval'), ns)
            if v is not None:
                value = repr(v)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return value
for line in proto_in:
    req = json.loads(line)
    state['alarm'] = False
    err = None
    value = None
    try:
        value = run(req['code'], max(0.001, req.get('timeout', 120)))
    except SyntaxError as e:
        err = ''.join(traceback.format_exception_only(type(e), e))
    except BaseException as e:
        # Drop the driver's own frames: the model should see its cell (and what it called) only.
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != __file__]
        err = 'Traceback (most recent call last):\n' + ''.join(traceback.format_list(frames)) + ''.join(traceback.format_exception_only(type(e), e))
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    cap.seek(0)
    out = cap.read().decode('utf-8', 'replace')
    cap.seek(0)
    cap.truncate()
    if value is not None:
        out += value + '\n'
    proto_out.write((json.dumps({'output': out, 'error': err, 'timedOut': state['alarm']}) + '\n').encode())
`}`;

/** Options of a {@link PythonRepl}. */
export interface PythonReplOptions {
  /** argv that starts `python3 {@link REPL_PYTHON_FLAGS} <driver> <cwd> <seccomp filter> <PATH>` inside the sandbox. */
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  maxOutputChars: number;
}

/**
 * A persistent Python process for one sandbox. Cells run one at a time (queued); state persists
 * between cells. A cell past its timeout is interrupted by the driver; if the process does not
 * answer within a grace period after that (a blocking C call), it is killed and the next cell
 * starts a fresh REPL (the result says so).
 */
export class PythonRepl {
  private proc: ChildProcess | null = null;
  private lines: AsyncIterator<string> | null = null;
  private queue: Promise<unknown> = Promise.resolve();
  private stderrTail = '';

  constructor(private readonly opts: PythonReplOptions) {}

  /** Host pid of the REPL's launcher, or null when not running. */
  get pid(): number | null {
    return this.proc?.pid ?? null;
  }

  /**
   * Runs one cell.
   * @throws SandboxError when the REPL cannot start.
   */
  run(code: string, timeoutMs: number): Promise<PythonResult> {
    const next = this.queue.then(() => this.runNow(code, timeoutMs));
    this.queue = next.catch(() => undefined);
    return next;
  }

  /** Kills the REPL process. Idempotent. */
  dispose(): void {
    const p = this.proc;
    this.proc = null;
    this.lines = null;
    if (p && p.exitCode === null) p.kill('SIGKILL');
  }

  private async ensure(): Promise<AsyncIterator<string>> {
    if (this.proc && this.lines && this.proc.exitCode === null) return this.lines;
    const [file, ...args] = this.opts.argv;
    const proc = spawn(file!, args, { env: this.opts.env, cwd: this.opts.cwd, stdio: ['pipe', 'pipe', 'pipe'] });
    this.proc = proc;
    this.stderrTail = '';
    proc.stderr!.on('data', (d: Buffer) => {
      this.stderrTail = (this.stderrTail + d.toString()).slice(-2000);
    });
    // A REPL that cannot start or dies is seen where it matters: its stdout ends (and the cell
    // fails with its stderr's tail); a write to its dead stdin (EPIPE) says nothing more.
    proc.on('error', () => undefined);
    proc.stdin!.on('error', () => undefined);
    this.lines = readline.createInterface({ input: proc.stdout! })[Symbol.asyncIterator]();
    const first = await this.lines.next();
    if (first.done) {
      this.dispose();
      throw new SandboxError(`the Python REPL did not start: ${this.stderrTail.trim()}`, { code: 'PYTHON_START' });
    }
    return this.lines;
  }

  private async runNow(code: string, timeoutMs: number): Promise<PythonResult> {
    const lines = await this.ensure();
    const proc = this.proc!;
    proc.stdin!.write(`${JSON.stringify({ code, timeout: timeoutMs / 1000 })}\n`);
    let timer: NodeJS.Timeout | undefined;
    // Grace: the driver's own alarm normally answers at timeoutMs.
    const killed = new Promise<'killed'>((resolve) => {
      timer = setTimeout(() => {
        proc.kill('SIGINT');
        timer = setTimeout(() => resolve('killed'), 1000);
      }, timeoutMs + 1000);
    });
    const r = await Promise.race([lines.next(), killed]);
    clearTimeout(timer);
    if (r === 'killed' || r.done) {
      const wasTimeout = r === 'killed';
      this.dispose();
      return {
        output: wasTimeout ? '' : this.stderrTail,
        error: wasTimeout
          ? 'The cell did not stop after its timeout; the Python REPL was restarted and its state is lost.'
          : 'The Python REPL exited; its state is lost and the next cell starts a fresh one.',
        timedOut: wasTimeout,
      };
    }
    const msg = JSON.parse(r.value) as PythonResult;
    return { ...msg, output: truncateMiddle(msg.output, this.opts.maxOutputChars).text };
  }
}
