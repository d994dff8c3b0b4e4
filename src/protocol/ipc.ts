import { z } from 'zod';
import { SerializedErrorSchema } from './trajectory.js';

/**
 * The envelope every frame of a msgpack Unix-socket channel carries (see docs/sandboxes.md,
 * "Wire protocol"). A frame is a 4-byte big-endian length followed by one msgpack map.
 *
 * - a request has a `type` and a numeric `id`; its reply has the same `id` and the type
 *   `<type>.result` or `error`;
 * - a notification has a `type` and no `id`, and gets no reply.
 */
export const IpcEnvelopeSchema = z.looseObject({
  type: z.string().min(1),
  id: z.number().int().nonnegative().optional(),
});
export type IpcEnvelope = z.infer<typeof IpcEnvelopeSchema>;

/** A failed request's reply: `{type: 'error', id, error}`; `error` is `serializeError()` of src/errors.ts. */
export const IpcErrorReplySchema = z.object({
  type: z.literal('error'),
  id: z.number().int().nonnegative(),
  error: SerializedErrorSchema,
});
export type IpcErrorReply = z.infer<typeof IpcErrorReplySchema>;
