import { sleep, type Clock } from '../../clock.js';
import type { TaskStatus } from './polar-models.js';

/** Attempts, spacing and retried statuses of the callback POST (the contract). */
export const CALLBACK_ATTEMPTS = 3;
export const CALLBACK_SPACING_MS = 5_000;
const RETRIED = new Set([408, 425, 429]);
/** One attempt's time limit (Polar's `_CALLBACK_TIMEOUT_SECONDS`). */
const ATTEMPT_TIMEOUT_MS = 10_000;

/** How one callback delivery went. */
export interface CallbackReport {
  delivered: boolean;
  attempts: number;
  /** The last status, or the transport error's message. */
  last: number | string;
}

/** Options of {@link postCallback}. */
export interface CallbackOptions {
  clock: Clock;
  signal?: AbortSignal | undefined;
  /** The HTTP client; default global fetch. */
  fetch?: typeof fetch | undefined;
}

/**
 * POSTs the terminal `TaskResult` to the trainer's `callback_url`: up to 3 attempts, 5 s apart
 * on the injected clock, retried on 408 / 425 / 429 / 5xx and on transport errors (refused,
 * reset, timed out after 10 s); any other answer ends it. Never throws and never blocks the
 * task's result: it stays pollable at `GET /rollout/task/{id}` whatever happens here. Redirects
 * are not followed (the URL is the trainer's; a redirect elsewhere is not its listener).
 */
export async function postCallback(url: string, body: TaskStatus, opts: CallbackOptions): Promise<CallbackReport> {
  const doFetch = opts.fetch ?? fetch;
  const text = JSON.stringify(body);
  let last: number | string = 'not attempted';
  for (let attempt = 1; attempt <= CALLBACK_ATTEMPTS; attempt++) {
    if (opts.signal?.aborted) return { delivered: false, attempts: attempt - 1, last: 'aborted' };
    const timeout = AbortSignal.timeout(ATTEMPT_TIMEOUT_MS);
    const signal = opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout;
    try {
      const res = await doFetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: text, redirect: 'manual', signal });
      // Only the status is read; a body that fails to cancel is the socket's end, not news.
      await res.body?.cancel().catch(() => undefined);
      last = res.status;
      if (res.status >= 200 && res.status < 300) return { delivered: true, attempts: attempt, last };
      if (!RETRIED.has(res.status) && res.status < 500) return { delivered: false, attempts: attempt, last };
    } catch (err) {
      last = err instanceof Error ? err.message : String(err);
    }
    if (attempt < CALLBACK_ATTEMPTS) {
      try {
        await sleep(opts.clock, CALLBACK_SPACING_MS, opts.signal);
      } catch {
        return { delivered: false, attempts: attempt, last: 'aborted' };
      }
    }
  }
  return { delivered: false, attempts: CALLBACK_ATTEMPTS, last };
}
