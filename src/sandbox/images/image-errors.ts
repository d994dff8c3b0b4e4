import { InfraError, TaskError } from '../../errors.js';

/** Where in an image a problem was found: the image (as the user named it) and, when known, the layer. */
export interface ImageWhere {
  image: string;
  layer?: string | undefined;
}

function where(w: ImageWhere): string {
  return w.layer ? `image '${w.image}', layer ${w.layer}` : `image '${w.image}'`;
}

/**
 * A broken or unknown image: missing, corrupt archive, digest mismatch, a layer entry that
 * leaves the root. A {@link TaskError} (the task names an image that cannot be used), never
 * retried. `code` is one of `IMAGE_NOT_FOUND`, `IMAGE_CORRUPT`, `IMAGE_DIGEST_MISMATCH`,
 * `IMAGE_UNSAFE_ENTRY`, `IMAGE_UNSUPPORTED`.
 */
export function imageTaskError(code: string, w: ImageWhere, problem: string, cause?: unknown): TaskError {
  return new TaskError(`${where(w)}: ${problem}`, { code, stage: 'init', details: { image: w.image, ...(w.layer ? { layer: w.layer } : {}) }, ...(cause === undefined ? {} : { cause }) });
}

/**
 * The machine could not store an image (disk full, I/O error): an {@link InfraError}, retried,
 * with code `IMAGE_DISK_FULL` or `IMAGE_IO`.
 */
export function imageInfraError(code: string, w: ImageWhere, problem: string, cause?: unknown): InfraError {
  return new InfraError(`${where(w)}: ${problem}`, { code, stage: 'init', details: { image: w.image, ...(w.layer ? { layer: w.layer } : {}) }, ...(cause === undefined ? {} : { cause }) });
}

/** True when `err` (or an error it wraps) is the kernel's "no space left on device" / quota error. */
export function isDiskFull(err: unknown): boolean {
  for (let e = err as { code?: unknown; errno?: unknown; cause?: unknown; message?: unknown } | undefined, i = 0; e && i < 5; e = e.cause as typeof e, i++) {
    if (e.code === 'ENOSPC' || e.code === 'EDQUOT') return true;
    if (typeof e.message === 'string' && /ENOSPC|no space left on device/i.test(e.message)) return true;
  }
  return false;
}
