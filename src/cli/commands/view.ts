import { basename, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { explainFlagError, numberFlag, UsageError } from '../args.js';
import { RolloutError } from '../../errors.js';
import { checkExposure } from '../../server/exposure.js';
import { openRunReplay } from '../../server/run-replay.js';
import { createService } from '../../server/service.js';
import { createVisualizerHandler } from '../../server/visualizer-assets.js';
import { formatBanner } from '../banner.js';
import { listenFailure } from '../listen-error.js';

const USAGE = `usage: rollout view DIR [options]

Serves a finished run's output directory (rollouts-out/<timestamp>/, written by rollout run) in
the visualizer, read-only: the same page at the same /visualizer path as rollout serve — rewards,
GRPO groups, tokens, the state graph, timeline, terminal replay and eval of every rollout.

  --host HOST    interface to bind (default 127.0.0.1)
  --port PORT    port (default 8006; 0 picks a free one)
  --token SECRET require Authorization: Bearer SECRET (also ROLLOUT_TOKEN)
`;

/** `rollout view DIR`: runs until SIGINT / SIGTERM. Exit 2 on bad flags or a directory that is not a run's. */
export async function run(argv: string[]): Promise<number> {
  let flags: { values: { host?: string | undefined; port?: string | undefined; token?: string | undefined; help?: boolean | undefined }; positionals: string[] };
  try {
    flags = parseArgs({ args: argv, allowPositionals: true, strict: true, options: { host: { type: 'string' }, port: { type: 'string' }, token: { type: 'string' }, help: { type: 'boolean', short: 'h' } } });
  } catch (err) {
    process.stderr.write(`rollout view: ${explainFlagError(err, ['host', 'port', 'token', 'help'])}\n\n${USAGE}`);
    return 2;
  }
  const v = flags.values;
  if (v.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const host = v.host ?? '127.0.0.1';
  let port = 8006;
  try {
    if (flags.positionals.length !== 1) throw new UsageError(flags.positionals.length === 0 ? 'missing DIR (a run\'s output directory, e.g. rollouts-out/<timestamp>)' : `expected one DIR, got ${flags.positionals.length}`);
    port = numberFlag('port', v.port, { integer: true }) ?? 8006;
    const token = v.token ?? process.env['ROLLOUT_TOKEN'];
    // A run's trajectories are as private as a live service's: the same exposure rule.
    const exposure = checkExposure(host, token, false);
    if (exposure.kind === 'refused') throw new UsageError(exposure.reason);
    const dir = resolve(flags.positionals[0]!);
    const replay = await openRunReplay(dir);
    // The page says "replay" (and of which run) instead of "live".
    const visualizer = createVisualizerHandler({ info: { mode: 'replay', run: { name: basename(dir), rollouts: replay.replay.rollouts, events: replay.replay.events } } });
    const service = createService({ createRuntime: () => Promise.resolve(replay), visualizer }, { host, port, ...(token ? { token } : {}) });
    let url: string;
    try {
      url = await service.listen();
    } catch (err) {
      process.stderr.write(`rollout view: ${(err as NodeJS.ErrnoException).syscall === 'listen' ? listenFailure(err, host, port) : (err as Error).message}\n`);
      return 1;
    }
    process.stdout.write(`listening on ${url}\n`);
    const r = replay.replay;
    process.stdout.write(
      formatBanner([
        ['visualizer', `${url}/visualizer`],
        ['run', `${dir} (read-only)`],
        ['rollouts', `${r.rollouts}, ${r.events} events${r.events === 0 ? ' (no events.jsonl: states, timeline and terminal replay are empty)' : ''}${r.skipped > 0 ? `; ${r.skipped} unreadable lines skipped` : ''}`],
      ]),
    );
    await new Promise<void>((res) => {
      process.once('SIGINT', () => res());
      process.once('SIGTERM', () => res());
    });
    await service.close();
    return 0;
  } catch (err) {
    process.stderr.write(`rollout view: ${(err as Error).message}\n${err instanceof UsageError ? `\n${USAGE}` : ''}`);
    return err instanceof UsageError || err instanceof RolloutError ? 2 : 1;
  }
}
