import { createWriteStream } from 'node:fs';
import type { Runtime } from '../../runtime/runtime-api.js';

/**
 * Records a run's event stream to `path` (JSON Lines, one event a line with its live `seq`), so
 * `rollout view` can replay the run in the visualizer afterwards: states, timeline, terminal.
 * Starts subscribing at once; `stop()` ends the subscription and resolves once every event
 * received is on disk. A gap (the writer fell a million events behind) is written as its own
 * line and replays as a gap.
 */
export function recordEvents(runtime: Pick<Runtime, 'events'>, path: string): { stop(): Promise<void> } {
  const out = createWriteStream(path);
  const abort = new AbortController();
  const loop = (async () => {
    try {
      for await (const ev of runtime.events({ after: 0, bufferSize: 1_000_000, signal: abort.signal })) out.write(`${JSON.stringify(ev)}\n`);
    } catch (err) {
      // The subscription ends by our abort (or the runtime closing): anything else is a bug worth a line.
      if (!abort.signal.aborted) process.stderr.write(`rollout run: the event recording stopped early: ${(err as Error).message}\n`);
    }
  })();
  return {
    async stop() {
      abort.abort();
      await loop;
      await new Promise<void>((resolve) => out.end(resolve));
    },
  };
}
