import { realpathSync } from 'node:fs';
import { isAbsolute, relative, resolve, sep } from 'node:path';
import { HttpError } from './http-error.js';
import { isHubName } from '../llm/codec-registry.js';

/**
 * API clients may not name arbitrary host paths (issue #9.12). A path-like field of an instance
 * or of `sampling_params` is served only when it resolves — symlinks followed — inside one of the
 * service's `pathRoots`; with no roots configured (the default) no host path may be named through
 * the API at all. An accepted field is rewritten to its real path, so what the handler opens is
 * what was checked. Error messages name the field, never a root or a resolved host path.
 */

/** Instance fields that always name a host path. */
const PATH_KEYS = new Set(['repo_dir']);
/** Any key ending so is taken for a host path too (`workspace_dir`, `tests_path`...). */
const PATH_SUFFIX = /(?:_dir|_path)$/;
/** An `image` that names a local layout (skopeo transports with a path) rather than a registry reference. */
const IMAGE_PATH = /^(?:oci|dir|oci-archive|docker-archive):|^[./~]/;

/**
 * Confines the path-like fields of one instance to `roots`, in place. Throws a 400
 * {@link HttpError} (`PATH_NOT_ALLOWED`) naming `<prefix>.<field>`.
 */
export function confineInstancePaths(instance: Record<string, unknown>, roots: readonly string[], prefix: string): void {
  for (const key of Object.keys(instance)) {
    const v = instance[key];
    if (typeof v !== 'string') continue;
    if (PATH_KEYS.has(key) || PATH_SUFFIX.test(key)) instance[key] = confine(v, roots, `${prefix}.${key}`);
    else if (key === 'image' && IMAGE_PATH.test(v)) {
      const m = /^([a-z-]+:)(.*)$/.exec(v);
      // A transport prefix stays; only the path part is confined (`oci:/x/layout:tag` keeps its tag).
      if (m && m[1] !== undefined && !v.startsWith('.') && !v.startsWith('/')) {
        const [path, ...tag] = m[2]!.split(':');
        instance[key] = `${m[1]}${confine(path!, roots, `${prefix}.${key}`)}${tag.length ? `:${tag.join(':')}` : ''}`;
      } else instance[key] = confine(v, roots, `${prefix}.${key}`);
    }
  }
}

/**
 * Confines `custom_tokenizer` (a directory) to `roots`, in place, unless it is a hub name
 * (`org/name`, looked up in the local Hugging Face cache only): `models` or `a/b/c` are paths.
 */
export function confineSamplingPaths(sampling: Record<string, unknown> | undefined, roots: readonly string[], prefix: string): void {
  const t = sampling?.['custom_tokenizer'];
  if (sampling && typeof t === 'string' && t !== '' && !isHubName(t)) {
    sampling['custom_tokenizer'] = confine(t, roots, `${prefix}.custom_tokenizer`);
  }
}

/**
 * The real path of `value` when it lies inside one of `roots` (a relative value is taken
 * relative to each root in turn). Throws 400 otherwise, or when it does not exist.
 */
export function confine(value: string, roots: readonly string[], field: string): string {
  if (roots.length === 0) {
    throw new HttpError(400, 'PATH_NOT_ALLOWED', `${field}: this service lets API clients name no host paths (start it with --path-root DIR to allow some)`, { issues: [{ path: field, message: 'host paths are not allowed from the API' }] });
  }
  if (value.includes('\0')) throw notAllowed(field, 'contains a NUL byte');
  if (value.startsWith('~')) throw notAllowed(field, "'~' is not expanded; give a path inside a path root");
  let missing = false;
  for (const root of roots) {
    let realRoot: string;
    try {
      realRoot = realpathSync(root);
    } catch {
      continue;
    }
    const candidate = isAbsolute(value) ? value : resolve(realRoot, value);
    let real: string;
    try {
      real = realpathSync(candidate);
    } catch {
      if (inside(realRoot, resolve(candidate))) missing = true;
      continue;
    }
    if (inside(realRoot, real)) return real;
  }
  throw notAllowed(field, missing ? 'does not exist inside the allowed path roots' : 'is outside the allowed path roots');
}

function inside(root: string, p: string): boolean {
  const rel = relative(root, p);
  return rel === '' || (!rel.startsWith(`..${sep}`) && rel !== '..' && !isAbsolute(rel));
}

function notAllowed(field: string, why: string): HttpError {
  return new HttpError(400, 'PATH_NOT_ALLOWED', `${field} ${why}`, { issues: [{ path: field, message: why }] });
}
