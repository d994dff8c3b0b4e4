import { TaskError } from '../../errors.js';
import type { SandboxSpec } from '../sandbox.js';

/**
 * Makes `instance.image` (a name or digest of the image store) the default image of every
 * sandbox a handler starts, so every task family runs in its instance's image without knowing
 * about images. A spec that names its own image keeps it. Without `instance.image` the context
 * is returned as it is (the host-root sandbox stays the default).
 *
 * @throws TaskError naming the field when `instance.image` is not a non-empty string.
 */
export function withInstanceImage<C extends { instance: Record<string, unknown>; createSandbox(spec: SandboxSpec): Promise<unknown> }>(ctx: C): C {
  const image = ctx.instance.image;
  if (image === undefined || image === null) return ctx;
  if (typeof image !== 'string' || image.length === 0 || image.length > 500) {
    throw new TaskError(`instance field 'image': expected the name or digest of an imported image, got ${JSON.stringify(image)?.slice(0, 80)}`, { code: 'BAD_IMAGE_FIELD', stage: 'init' });
  }
  const create = ctx.createSandbox.bind(ctx);
  const out = Object.assign({}, ctx);
  out.createSandbox = ((spec: SandboxSpec) => create(spec.image === undefined ? { ...spec, image } : spec)) as C['createSandbox'];
  return out;
}
