import crypto from 'node:crypto';
import { SandboxError } from '../errors.js';

/**
 * A shell's state across a fork (#26): what {@link captureCommand} prints in the parent's shell
 * is a bash script that, sourced in a branch's fresh shell, restores it — the working directory,
 * shell and exported variables (arrays and attributes included), functions (and which are
 * exported), aliases, `umask`, `shopt` options and `set -o` options.
 *
 * Not carried (docs/sandboxes.md, "Forks"): readonly and bash-maintained variables (BASHPID,
 * UID, SHELLOPTS, RANDOM, LINENO…), the runtime's own (PROMPT_COMMAND, PS0–PS2, HISTFILE), the
 * LLM proxy's OPENAI_* pair (each branch has its own), traps, history, the directory stack, jobs.
 *
 * Both commands run through {@link import('./pty-session.js').PtySession.internal} and leave no
 * trace: every builtin is called as `\builtin` (a function or alias of the policy's named like
 * one is not run), the capture runs in a subshell (nothing it sets reaches the shell), the
 * line's history entry is deleted, and `$?` is set back to the last command's status.
 */

/** Variables that are bash's own, the runtime's, or per-branch: never carried. */
const SKIP = [
  'BASH*', 'COMP_*', '__rr_*', '_', 'COLUMNS', 'LINES', 'DIRSTACK', 'EPOCHREALTIME', 'EPOCHSECONDS', 'EUID', 'FUNCNAME', 'GROUPS',
  'HISTCMD', 'HISTFILE', 'HOSTNAME', 'HOSTTYPE', 'LINENO', 'MACHTYPE', 'OSTYPE', 'PIPESTATUS', 'PPID', 'PWD', 'RANDOM', 'SECONDS',
  'SHELLOPTS', 'SHLVL', 'SRANDOM', 'UID', 'PROMPT_COMMAND', 'PS0', 'PS1', 'PS2', 'OPENAI_BASE_URL', 'OPENAI_API_KEY',
];

/** Deletes the internal line's own history entry (added before it ran), when history is on. */
const NO_HISTORY = `[[ :$SHELLOPTS: != *:history:* ]] || \\builtin history -d -1 2>/dev/null`;

/** Sets `$?` back to `code` (a subshell's exit); skipped under errexit, where a failing status would end the shell. */
function keepStatus(code: number | null): string {
  const c = code === null ? 0 : Math.max(0, Math.min(255, code));
  return c === 0 ? '\\builtin true' : `[[ $- == *e* ]] || (\\builtin exit ${c})`;
}

/** A capture: the command to run in the parent's shell and how to read its output. */
export interface ShellCapture {
  command: string;
  /** The restore script from the command's raw terminal output. @throws SandboxError when it is not there. */
  parse(rawOutput: string): string;
}

/**
 * The capture command for a shell whose last command exited with `lastExit`: prints the restore
 * script base64-encoded between two markers (the terminal would otherwise rewrite its line ends
 * and mangle bytes that are not UTF-8), after the shell's `$-`.
 */
export function captureCommand(lastExit: number | null): ShellCapture {
  const token = crypto.randomBytes(6).toString('hex');
  const b = '\\builtin';
  // One printf prints both markers and the state (a command substitution): a DEBUG trap of the
  // policy's, run before each top-level command, can print only outside them.
  const script = [
    `${b} printf '\\002FS%s%s:%s:%s:\\003' ${token.slice(0, 6)} ${token.slice(6)} "$-" "$( ( __rr_o=$(${b} set +o); ${b} set +e +u +o pipefail;` +
      ` ${b} printf '%s cd -- %q || %s true\\n' '${b}' "$PWD" '${b}';` +
      ` ${b} compgen -v | while IFS= ${b} read -r __rr_v; do case $__rr_v in ${SKIP.join('|')}) continue;; esac;` +
      ` [[ \${!__rr_v@a} == *r* ]] && continue; ${b} declare -p -- "$__rr_v"; done;` +
      ` ${b} declare -f; ${b} declare -F | while IFS=' ' ${b} read -r _ __rr_f __rr_n; do [[ $__rr_f == *x* ]] && ${b} printf '%s declare -fx -- %q\\n' '${b}' "$__rr_n"; done;` +
      ` ${b} alias -p; ${b} umask -p; ${b} shopt -p; ${b} printf '%s\\n' "$__rr_o" ) | ${b} command -p base64 -w0)"`,
    NO_HISTORY,
    keepStatus(lastExit),
  ].join('; ');
  const start = `\x02FS${token}:`;
  return {
    command: script,
    parse(raw: string): string {
      const i = raw.indexOf(start);
      const j = i < 0 ? -1 : raw.indexOf(':\x03', i + start.length);
      if (i < 0 || j < 0) throw new SandboxError('the shell state capture printed no state', { code: 'FORK_FAILED' });
      const [flags = '', b64raw = ''] = raw.slice(i + start.length, j).split(':');
      const b64 = b64raw.replace(/\s+/g, '');
      if (!/^[A-Za-z0-9+/]*={0,2}$/.test(b64)) throw new SandboxError('the shell state capture printed malformed state', { code: 'FORK_FAILED' });
      // A command substitution runs without errexit (bash outside POSIX mode): `$-`, expanded by
      // the shell itself, says whether it was on.
      return Buffer.from(b64, 'base64').toString('utf8') + (flags.includes('e') ? '\\builtin set -e\n' : '');
    },
  };
}

/**
 * The command that restores a captured state in a branch's fresh shell from `file` (the script,
 * as the shell sees it), then sets `$?` to the parent's last status.
 *
 * With `gate` (a FIFO, as the shell sees it: branch-fs.ts `BranchGate`), the shell first waits
 * for its `go` — the branch's workspace is mounted over /workspace meanwhile — and exits on
 * anything else; then it enters the new /workspace (its start directory is the empty one the
 * overlay now covers) before the state's own `cd`. A gated shell may be started before its
 * parent is known (a fork pool's, fork-pool.ts): the last status then comes from the file, which
 * ends with {@link statusLine} (`lastExit` is not used).
 */
export function restoreCommand(file: string, lastExit: number | null, gate?: string): string {
  const wait = gate ? [`\\builtin read -r __rr_g < ${quote(gate)} && [[ $__rr_g == go ]] || \\builtin exit 97`, '\\builtin unset __rr_g', '\\builtin cd /workspace || \\builtin exit 97'] : [];
  // The eval's string is expanded before it runs: the status is read, then the variable goes.
  const status = gate ? `\\builtin eval "\\builtin unset __rr_s; [[ \\$- == *e* ]] || (\\builtin exit \${__rr_s:-0})"` : keepStatus(lastExit);
  return [...wait, `\\builtin . ${quote(file)} >/dev/null 2>&1`, NO_HISTORY, status].join('; ');
}

/** The last line of a gated branch's state file: the parent's last status, for {@link restoreCommand} to set as `$?`. */
export function statusLine(lastExit: number | null): string {
  return `\n__rr_s=${lastExit === null ? 0 : Math.max(0, Math.min(255, lastExit))}\n`;
}

/** `s` single-quoted for bash. */
function quote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}
