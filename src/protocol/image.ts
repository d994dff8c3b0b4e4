import { z } from 'zod';

/**
 * What a sandbox needs of an image, as the runtime sends it to a sandbox host: the lower
 * directories (top layer FIRST, overlayfs' `lowerdir` order) and the config to honour.
 */
export const ResolvedImageSchema = z.object({
  /** The name or digest the instance gave. */
  ref: z.string(),
  id: z.string(),
  /** Absolute paths of the unpacked layers, top first. */
  lowerDirs: z.array(z.string()).min(1),
  env: z.record(z.string(), z.string()),
  workingDir: z.string().nullable(),
  user: z.string().nullable(),
  entrypoint: z.array(z.string()).nullable(),
  cmd: z.array(z.string()).nullable(),
});
/** See {@link ResolvedImageSchema}. */
export type ResolvedImage = z.infer<typeof ResolvedImageSchema>;
