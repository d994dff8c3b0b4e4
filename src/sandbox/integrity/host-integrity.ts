import { TaskError } from '../../errors.js';
import { globSet, type FileObservationResult } from '../../protocol/integrity.js';
import { FileMonitor } from './file-monitor.js';
import { RootMonitor } from './root-monitor.js';

/** The monitors of each sandbox of this host, dropped with the sandbox. */
const monitors = new WeakMap<object, { files: FileMonitor; root: RootMonitor | null }>();

/**
 * Handles a `sandbox.integrity` request on the host that owns `sb`: `start` takes the baseline
 * of its workspace with `protect` (replacing an earlier monitor), `observe` scans once at `turn`.
 * @throws TaskError (`INTEGRITY_POLICY`) for a bad glob (validated at submit, so only a client
 *   that skipped the validation), or (`INTEGRITY_NOT_STARTED`) for an observe before a start.
 */
export function handleIntegrity(sb: { readonly workdir: string; readonly overlayChanges?: { upper: string; workspace: string } | null }, req: { op: 'start' | 'observe'; protect?: string[] | undefined; turn?: number | undefined }): FileObservationResult {
  if (req.op === 'start') {
    let globs;
    try {
      globs = globSet(req.protect ?? []);
    } catch (e) {
      throw new TaskError(`integrity.protect: ${(e as Error).message}`, { code: 'INTEGRITY_POLICY' });
    }
    const files = new FileMonitor(sb.workdir, globs);
    const ov = sb.overlayChanges ?? null;
    const root = ov ? new RootMonitor(ov.upper, ov.workspace) : null;
    monitors.set(sb, { files, root });
    const t0 = performance.now();
    const r = files.start();
    root?.start();
    return { violations: [], created: 0, modified: 0, deleted: 0, entries: r.entries, truncated: r.truncated || (root?.truncated ?? false), ms: performance.now() - t0 };
  }
  const m = monitors.get(sb);
  if (!m) throw new TaskError('integrity observe before start', { code: 'INTEGRITY_NOT_STARTED' });
  const t0 = performance.now();
  const o = m.files.observe(req.turn ?? 0);
  if (m.root) {
    o.violations.push(...m.root.observe(req.turn ?? 0));
    o.truncated ||= m.root.truncated;
  }
  o.ms = performance.now() - t0;
  return o;
}
