/**
 * The direct token-level baseline of the proxy benches (bench/harness.ts, bench/proxy-hops.ts):
 * this process → the fake backend with `HttpBackend.generate`, replaying recorded prompt ids in
 * order on one client, each call timed. The leading `_` keeps run-all from running it.
 */
import { HttpBackend } from '../src/llm/http-backend.js';

/** A prompt the proxy (or the floor) sent to the backend, kept for the direct replay. */
export interface RecordedCall {
  promptIds: number[];
  maxTokens: number;
}

/** CPU time of this process so far (user + system, every thread), in ms. */
export function cpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

/** A direct client of the backend at `url`; close it when done. */
export class DirectCalls {
  private readonly backend: HttpBackend;
  private turn = 0;

  constructor(url: string) {
    this.backend = new HttpBackend({ id: 'direct', url, protocol: 'prorl' });
  }

  /** Replays `calls` in order: each one's latency, and this process's CPU over them all (ms). */
  async run(calls: readonly RecordedCall[]): Promise<{ lat: number[]; cpu: number }> {
    const lat: number[] = [];
    const cpu0 = cpuMs();
    for (const c of calls) {
      const t = performance.now();
      await this.backend.generate({ rolloutId: 'direct', instance: { data_source: 'bench', instance_id: 'direct' }, turn: this.turn++, promptIds: c.promptIds, maxTokens: c.maxTokens, sampling: { temperature: 1 }, signal: new AbortController().signal }, 60_000);
      lat.push(performance.now() - t);
    }
    return { lat, cpu: cpuMs() - cpu0 };
  }

  close(): void {
    this.backend.close();
  }
}
