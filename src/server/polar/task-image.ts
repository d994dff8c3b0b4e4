import { ValidationError } from '../../errors.js';
import { normalizeImageRef } from '../../sandbox/images/image-ref.js';
import { ImageStore } from '../../sandbox/images/image-store.js';

/**
 * What the server does with a task's `runtime.image`:
 * - `strict` (the default): every session runs in that image of the image store (after
 *   `imageAliases`); an image this server's store lacks is refused at submit (422), and on a
 *   `--redis` gateway (no store of its own) fails each session with `IMAGE_NOT_FOUND`;
 * - `ignore`: `runtime.image` is dropped and sessions run on the sandbox's default root (the
 *   host's, or `--rootfs`), for operators whose trainers name images they do not want to mirror.
 */
export type PolarImagePolicy = 'strict' | 'ignore';

/** The image a task's sessions run in. */
export interface TaskImage {
  /** `runtime.image` as the trainer sent it; null when it named none. */
  requested: string | null;
  /** The image-store name the sessions run in; null: the sandbox's default root. */
  ref: string | null;
  /** True when `requested` was mapped by an alias. */
  aliased: boolean;
}

/** An image given as a host path or a local transport: never a name of the image store. */
const PATH_LIKE = /^(?:oci|dir|oci-archive|docker-archive):|^[./~]/;

/**
 * The image a task runs in (a pure function): none when `runtime.image` is absent or the policy
 * is `ignore`; else the alias of `runtime.image` in `aliases` (matched as written, then both sides
 * normalised by {@link normalizeImageRef}, then the catch-all `*`), else `runtime.image` itself
 * without a `docker://` transport (the store finds `docker.io/…` and `:latest` forms by itself).
 *
 * @throws ValidationError naming `runtime.image` (a 422) for a host path or local transport:
 *   the store holds names, and a path is imported once with `rollout image import`.
 */
export function taskImage(requested: string | null | undefined, policy: PolarImagePolicy, aliases: Readonly<Record<string, string>>): TaskImage {
  if (requested === null || requested === undefined) return { requested: null, ref: null, aliased: false };
  if (policy === 'ignore') return { requested, ref: null, aliased: false };
  let ref: string | undefined = aliases[requested];
  if (ref === undefined) {
    const want = normalizeImageRef(requested);
    ref = Object.entries(aliases).find(([k]) => k !== '*' && normalizeImageRef(k) === want)?.[1];
  }
  const aliased = ref !== undefined || aliases['*'] !== undefined;
  ref ??= aliases['*'] ?? requested.replace(/^docker:\/\//, '');
  if (PATH_LIKE.test(ref)) {
    throw new ValidationError('invalid TaskRequest', [
      { path: 'runtime.image', message: `'${ref.slice(0, 200)}' is a host path; sessions run in images of this server's image store: import it once with \`rollout image import PATH --name NAME\` and name NAME (or map it with \`rollout serve --image-alias\`)` },
    ]);
  }
  return { requested, ref, aliased };
}

/** What an operator does about an image the store lacks: the words a 422 and a failed session share. */
export function importHint(image: TaskImage): string {
  const ref = (image.ref ?? '').slice(0, 200);
  const from = (image.requested ?? ref).slice(0, 200);
  const alias = image.aliased ? `, or change the alias that maps runtime.image '${from}' onto it` : `, or map it onto an imported image with \`rollout serve --image-alias ${from}=NAME\``;
  return `import it with \`rollout image import PATH --name ${ref}\` (PATH a \`docker save\` tarball or an OCI layout)${alias}`;
}

/**
 * Refuses, before anything starts, a task whose image is not in `storeDir` (the image store this
 * server's own sandboxes read).
 *
 * @throws ValidationError naming `runtime.image` (a 422 in FastAPI's shape) with the import command.
 */
export function requireLocalImage(image: TaskImage, storeDir: string): void {
  if (image.ref === null) return;
  if (new ImageStore(storeDir).has(image.ref)) return;
  throw new ValidationError('invalid TaskRequest', [
    { path: 'runtime.image', message: `image '${image.ref.slice(0, 200)}' is not in this server's image store; ${importHint(image)}` },
  ]);
}
