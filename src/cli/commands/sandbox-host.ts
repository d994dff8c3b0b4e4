import { numberFlag, parseFlags, UsageError } from '../args.js';
import { runSandboxHost } from '../../sandbox/sandbox-host.js';

const HELP = `usage: rollout sandbox-host --socket PATH --state-dir DIR [--max-frame-bytes N]

A process that owns many sandboxes, started by the runtime (one per CPU by default). It serves
one runtime connection on the Unix socket PATH; when that connection closes it kills its
sandboxes and exits. Prints "ready <pid>" once listening.
`;

/** `rollout sandbox-host`: see {@link runSandboxHost}. Returns the exit code (2 on bad usage). */
export async function run(argv: string[]): Promise<number> {
  const flags = parseFlags('sandbox-host', argv, {
    socket: { type: 'string' },
    'state-dir': { type: 'string' },
    'max-frame-bytes': { type: 'string' },
  }, HELP);
  if (typeof flags === 'number') return flags;
  const values = flags.values;
  if (!values.socket || !values['state-dir']) {
    process.stderr.write(`rollout sandbox-host: --socket and --state-dir are required\n\n${HELP}`);
    return 2;
  }
  let maxFrameBytes: number | undefined;
  try {
    maxFrameBytes = numberFlag('max-frame-bytes', values['max-frame-bytes'], { integer: true });
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    process.stderr.write(`rollout sandbox-host: ${e.message}\n\n${HELP}`);
    return 2;
  }
  const code = await runSandboxHost({
    socketPath: values.socket,
    stateDir: values['state-dir'],
    ...(maxFrameBytes !== undefined ? { maxFrameBytes } : {}),
  });
  // Sandbox processes are gone; do not wait for stray handles (pty reader threads).
  process.exit(code);
}
