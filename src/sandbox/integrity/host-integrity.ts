import { TaskError } from '../../errors.js';
import { globSet, type FileObservationResult } from '../../protocol/integrity.js';
import { FileMonitor } from './file-monitor.js';

/** The file monitor of each sandbox of this host, dropped with the sandbox. */
const monitors = new WeakMap<object, FileMonitor>();

/**
 * Handles a `sandbox.integrity` request on the host that owns `sb`: `start` takes the baseline
 * of its workspace with `protect` (replacing an earlier monitor), `observe` scans once at `turn`.
 * @throws TaskError (`INTEGRITY_POLICY`) for a bad glob (validated at submit, so only a client
 *   that skipped the validation), or (`INTEGRITY_NOT_STARTED`) for an observe before a start.
 */
export function handleIntegrity(sb: { readonly workdir: string }, req: { op: 'start' | 'observe'; protect?: string[] | undefined; turn?: number | undefined }): FileObservationResult {
  if (req.op === 'start') {
    let globs;
    try {
      globs = globSet(req.protect ?? []);
    } catch (e) {
      throw new TaskError(`integrity.protect: ${(e as Error).message}`, { code: 'INTEGRITY_POLICY' });
    }
    const m = new FileMonitor(sb.workdir, globs);
    monitors.set(sb, m);
    const r = m.start();
    return { violations: [], created: 0, modified: 0, deleted: 0, entries: r.entries, truncated: r.truncated, ms: r.ms };
  }
  const m = monitors.get(sb);
  if (!m) throw new TaskError('integrity observe before start', { code: 'INTEGRITY_NOT_STARTED' });
  return m.observe(req.turn ?? 0);
}
