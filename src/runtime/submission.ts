import { ValidationError } from '../errors.js';
import { InstanceSchema, SamplingParamsSchema, type Instance, type SamplingParams } from '../protocol/instance.js';

/**
 * Validates a submission's instance and sampling parameters (sampling defaults to `{}`).
 * @throws ValidationError naming each bad field as `instance.<path>` or `sampling.<path>`.
 */
export function validateSubmission(instance: unknown, sampling: unknown): { instance: Instance; sampling: SamplingParams } {
  const i = InstanceSchema.safeParse(instance);
  if (!i.success) throw zodToValidation('instance', i.error.issues);
  // No sampling: a fresh copy of `{}` parsed once, instead of a parse per submission (~3 µs, the
  // schema has twenty optional fields).
  if (sampling === undefined || sampling === null) return { instance: i.data, sampling: { ...(noSampling ??= SamplingParamsSchema.parse({})) } };
  const s = SamplingParamsSchema.safeParse(sampling);
  if (!s.success) throw zodToValidation('sampling', s.error.issues);
  return { instance: i.data, sampling: s.data };
}

/** `SamplingParamsSchema.parse({})`, made on first use. */
let noSampling: SamplingParams | undefined;

/** A ValidationError listing zod issues under `root` (paths joined with dots). */
export function zodToValidation(root: string, issues: { path: PropertyKey[]; message: string }[]): ValidationError {
  const list = issues.map((i) => ({ path: [root, ...i.path.map(String)].join('.'), message: i.message }));
  return new ValidationError(`invalid ${root}: ${list.map((i) => `${i.path}: ${i.message}`).join('; ')}`, list);
}
