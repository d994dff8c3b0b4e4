import type { BackendInfo } from './llm-client.js';

/** What one engine answered to an abort: how many generations it aborted, or why it could not. */
export interface EngineAbortReport {
  id: string;
  /** Generations the engine ended (null: unknown, or no abort route). */
  aborted: number | null;
  error?: string;
}

const ABORT_TIMEOUT_MS = 10_000;

/**
 * Asks every token-protocol engine in `backends` to abort its generations in flight (SGLang's
 * `POST /abort_request {abort_all}`; `fake-llm` and `llm-serve` serve it too). Each answers what it
 * had sampled (finish `abort`) and the runtime resumes those turns on prompt + partial ids at the
 * next LLM call (through the pause gate). An engine without the route (vLLM, OpenAI) or not
 * answering within 10 s is reported, never thrown: its calls finish normally.
 */
export async function abortEngines(backends: readonly BackendInfo[]): Promise<EngineAbortReport[]> {
  return Promise.all(
    backends
      .filter((b) => b.state !== 'removed')
      .map(async (b): Promise<EngineAbortReport> => {
        if (b.protocol === 'openai' || !/^https?:\/\//.test(b.url)) return { id: b.id, aborted: null, error: 'no abort route' };
        try {
          const res = await fetch(`${b.url.replace(/\/+$/, '')}/abort_request`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"abort_all":true}', signal: AbortSignal.timeout(ABORT_TIMEOUT_MS) });
          const body = (await res.json().catch(() => ({}))) as { aborted?: unknown };
          if (!res.ok) return { id: b.id, aborted: null, error: `HTTP ${res.status}` };
          return { id: b.id, aborted: typeof body.aborted === 'number' ? body.aborted : null };
        } catch (e) {
          return { id: b.id, aborted: null, error: (e as Error).message.slice(0, 200) };
        }
      }),
  );
}
