/**
 * Turning raw terminal output into what the model sees: ANSI sequences stripped, line endings
 * normalised, long output cut in the middle.
 */

// CSI (ESC [ ... final), OSC (ESC ] ... BEL or ESC \), two-byte escapes (ESC + one char), and
// the 8-bit CSI. Anchored on ESC so ordinary text is never touched.
// eslint-disable-next-line no-control-regex
const ANSI = /\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[PX^_][^\x1b]*\x1b\\|\x1b[@-Z\\-_]|\x9b[0-?]*[ -/]*[@-~]/g;

/**
 * Removes ANSI escape sequences, turns CRLF into LF and keeps only the last rewrite of a line
 * overwritten with bare CRs (progress bars), so the model sees what a terminal would show.
 */
export function cleanTerminalOutput(raw: string): string {
  let s = raw.replace(ANSI, '').replace(/\r+\n/g, '\n');
  if (s.includes('\r')) s = s.split('\n').map((line) => line.slice(line.lastIndexOf('\r') + 1)).join('\n');
  // Remaining C0 controls other than tab/newline (BEL, backspace...) carry nothing for a model.
  // eslint-disable-next-line no-control-regex
  return s.replace(/[\x00-\x08\x0b-\x1f\x7f]/g, '');
}

/**
 * Cuts `text` to about `maxChars` when longer: keeps the head (40%), a slice centred 80% of
 * the way through (20%) and the tail (40%), each gap replaced by a note saying how many
 * characters were dropped. Returns the text unchanged when it fits.
 */
export function truncateMiddle(text: string, maxChars: number): { text: string; truncated: boolean } {
  if (text.length <= maxChars) return { text, truncated: false };
  const head = Math.floor(maxChars * 0.4);
  const tail = Math.floor(maxChars * 0.4);
  const mid = maxChars - head - tail;
  let midStart = Math.floor(text.length * 0.8 - mid / 2);
  midStart = Math.max(head, Math.min(midStart, text.length - tail - mid));
  const tailStart = text.length - tail;
  const note = (n: number): string => `\n[... ${n} characters truncated ...]\n`;
  const gap1 = midStart - head;
  const gap2 = tailStart - (midStart + mid);
  const out =
    text.slice(0, head) +
    (gap1 > 0 ? note(gap1) : '') +
    text.slice(midStart, midStart + mid) +
    (gap2 > 0 ? note(gap2) : '') +
    text.slice(tailStart) +
    `\n[Output truncated: ${text.length} characters, showing the first ${head}, ${mid} from around 80% of the way through, and the last ${tail}.]`;
  return { text: out, truncated: true };
}

/** The shell tool's notes to a model, appended to a bash result's output (pty-session.ts). */
export const HINT_TIMEOUT =
  '\n[The command has not finished. Send an empty command to wait for more output, send input with is_input=true, or send C-c (is_input=true) to interrupt it.]';
export const HINT_BUSY = '\n[A command is still running; the text above is its new output. Your command was NOT run. Wait with an empty command, send input with is_input=true, or send C-c to interrupt.]';
export const HINT_NOT_SENT = '\n[No command is running; the input was not sent.]';
export const HINT_IDLE = '\n[No command is running.]';
const HINTS = [HINT_TIMEOUT, HINT_BUSY, HINT_NOT_SENT, HINT_IDLE];

/**
 * `output` of a bash result without the note to a model the shell appended to it ("[The command
 * has not finished. ...]" and the like), byte for byte as the command printed it: for a program
 * (a harness's log, an eval's output) that reads a command's output over several calls and
 * joins them, where a note would split a line the command wrote in two pieces.
 */
export function withoutShellNote(output: string): string {
  for (const h of HINTS) if (output.endsWith(h)) return output.slice(0, -h.length);
  return output;
}
