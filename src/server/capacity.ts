import { HttpError } from './http-error.js';
import type { ServiceRuntime } from './service-runtime.js';

/**
 * Refuses `n` more rollouts that the runtime's admission queue cannot hold, with 429
 * (`retry-after: 1`) and before any is admitted. The test is the runtime's own (queued + n >
 * maxQueued, see the supervisor's `checkAdmission`), so what passes here is admitted whole; it
 * is skipped for a runtime that does not tell its `maxQueued` (its submit then decides).
 * Throws 503 when the runtime no longer takes work.
 */
export function checkCapacity(rt: ServiceRuntime, n: number): void {
  const max = rt.options?.maxQueued;
  const st = rt.status();
  if (st.state !== 'running') throw new HttpError(503, 'RUNTIME_CLOSED', 'the runtime is closing and takes no new work');
  if (max === undefined || st.queued + n <= max) return;
  throw new HttpError(429, 'QUEUE_FULL', `the admission queue cannot take ${n} more rollouts (${st.queued} queued, limit maxQueued=${max}); nothing was admitted`, { headers: { 'retry-after': '1' } });
}
