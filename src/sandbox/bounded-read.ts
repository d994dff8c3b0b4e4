import fs from 'node:fs';
import { promisify } from 'node:util';
import { StringDecoder } from 'node:string_decoder';

/**
 * Bounded reads of an open fd (the sandbox host's side of a workspace file or directory): memory
 * stays bounded whatever a sandbox put there, and reads beyond the first chunk go through
 * libuv's thread pool, off the host's event loop. Opening safely is workspace-fs.ts's job.
 */

const CHUNK = 64 * 1024;
const readAsync = promisify(fs.read);

/**
 * Lists the directory held by `dirFd`: at most `max` entries (in directory order, so a
 * directory of a million files costs no more than `max`), sorted by name.
 */
export async function listDir(dirFd: number, max: number): Promise<{ entries: { name: string; isDir: boolean }[]; truncated: boolean }> {
  const dir = await fs.promises.opendir(`/proc/self/fd/${dirFd}`, { bufferSize: 128 });
  const entries: { name: string; isDir: boolean }[] = [];
  let truncated = false;
  try {
    for (let e = await dir.read(); e; e = await dir.read()) {
      if (entries.length >= max) {
        truncated = true;
        break;
      }
      entries.push({ name: e.name, isDir: e.isDirectory() });
    }
  } finally {
    // The listing is read (or its error thrown); a failed close of a read-only handle loses nothing.
    await dir.close().catch(() => undefined);
  }
  entries.sort((a, b) => a.name.localeCompare(b.name));
  return { entries, truncated };
}

/**
 * Reads at most `maxBytes` of the open file from the start (off the event loop).
 * `truncated` is true when the file holds more.
 */
export async function readBounded(fd: number, maxBytes: number): Promise<{ buf: Buffer; truncated: boolean }> {
  const chunks: Buffer[] = [];
  let total = 0;
  // The first chunk is read in place: a small file (the common case, on the host round-trip
  // path of bench/sandbox.ts) then costs no thread-pool hop. A regular file's read does not
  // block beyond the disk; the rest, if any, goes through the pool.
  const first = Buffer.allocUnsafe(Math.min(CHUNK, maxBytes + 1));
  const n = fs.readSync(fd, first, 0, first.length, 0);
  if (n < first.length) return { buf: first.subarray(0, n), truncated: false };
  chunks.push(first);
  total = n;
  for (;;) {
    const want = Math.min(CHUNK * 16, maxBytes + 1 - total);
    if (want <= 0) break;
    const b = Buffer.allocUnsafe(want);
    const { bytesRead } = await readAsync(fd, b, 0, want, total);
    if (bytesRead === 0) break;
    chunks.push(b.subarray(0, bytesRead));
    total += bytesRead;
  }
  const buf = Buffer.concat(chunks);
  return buf.length > maxBytes ? { buf: buf.subarray(0, maxBytes), truncated: true } : { buf, truncated: false };
}

/**
 * Streams the lines of an open file (split on `\n`, as `String.split` does: a final newline
 * gives a last empty line) to `onLine` with 1-based numbers until `onLine` returns false, EOF,
 * or `maxScanBytes` were read. A line longer than `maxLineChars` is passed cut to that length.
 * Memory stays bounded by the chunk and `maxLineChars`, whatever the file.
 */
export async function scanLines(
  fd: number,
  onLine: (line: string, n: number) => boolean,
  opts: { maxScanBytes: number; maxLineChars: number },
): Promise<{ eof: boolean; lines: number; scannedBytes: number }> {
  const decoder = new StringDecoder('utf8');
  const buf = Buffer.allocUnsafe(CHUNK);
  const max = opts.maxLineChars;
  let partial = '';
  // A line that reached `max` is handed over at once (so a file with no newline at all can be
  // stopped early) and its rest skipped up to the newline.
  let emitted = false;
  let n = 0;
  let pos = 0;
  for (;;) {
    if (pos >= opts.maxScanBytes) return { eof: false, lines: n, scannedBytes: pos };
    const { bytesRead } = await readAsync(fd, buf, 0, Math.min(CHUNK, opts.maxScanBytes - pos), pos);
    if (bytesRead === 0) break;
    pos += bytesRead;
    const text = decoder.write(buf.subarray(0, bytesRead));
    let start = 0;
    for (;;) {
      const nl = text.indexOf('\n', start);
      const end = nl < 0 ? text.length : nl;
      if (!emitted) {
        partial += text.slice(start, Math.min(end, start + max - partial.length));
        if (nl >= 0 || partial.length >= max) {
          emitted = true;
          if (!onLine(partial, ++n)) return { eof: false, lines: n, scannedBytes: pos };
        }
      }
      if (nl < 0) break;
      partial = '';
      emitted = false;
      start = nl + 1;
    }
  }
  if (!emitted) onLine((partial + decoder.end()).slice(0, max), ++n);
  return { eof: true, lines: n, scannedBytes: pos };
}
