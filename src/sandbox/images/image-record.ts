import { z } from 'zod';

/**
 * The part of an OCI image config (`config` of the config blob) the sandbox honours. Unknown
 * keys are kept out: only these reach a sandbox.
 */
export const ImageConfigSchema = z.object({
  /** `KEY=value` strings. */
  Env: z.array(z.string()).nullable().optional(),
  WorkingDir: z.string().nullable().optional(),
  User: z.string().nullable().optional(),
  Entrypoint: z.array(z.string()).nullable().optional(),
  Cmd: z.array(z.string()).nullable().optional(),
});
/** See {@link ImageConfigSchema}. */
export type ImageConfig = z.infer<typeof ImageConfigSchema>;

/** One imported image as the store keeps it on disk (`images/<id hex>.json`). */
export const ImageRecordSchema = z.object({
  /** `sha256:<hex>` of the config blob. */
  id: z.string(),
  /** `sha256:<hex>` of the OCI manifest, when imported from a layout. */
  manifestDigest: z.string().optional(),
  /** Every name the image was imported under. */
  names: z.array(z.string()),
  config: ImageConfigSchema,
  /** diff_ids, bottom layer first: each is a directory `layers/<hex>` of the store. */
  layers: z.array(z.string()),
  /** Bytes of file content over all layers. */
  bytes: z.number(),
  importedAt: z.string(),
  source: z.string(),
});
/** See {@link ImageRecordSchema}. */
export type ImageRecord = z.infer<typeof ImageRecordSchema>;

export { ResolvedImageSchema, type ResolvedImage } from '../../protocol/image.js';
