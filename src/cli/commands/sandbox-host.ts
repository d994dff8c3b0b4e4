import { parseArgs } from 'node:util';
import { runSandboxHost } from '../../sandbox/sandbox-host.js';

const HELP = `usage: rollout sandbox-host --socket PATH --state-dir DIR [--max-frame-bytes N]

A process that owns many sandboxes, started by the runtime (one per CPU by default). It serves
one runtime connection on the Unix socket PATH; when that connection closes it kills its
sandboxes and exits. Prints "ready <pid>" once listening.
`;

/** `rollout sandbox-host`: see {@link runSandboxHost}. Returns the exit code (2 on bad usage). */
export async function run(argv: string[]): Promise<number> {
  let values: { socket?: string | undefined; 'state-dir'?: string | undefined; 'max-frame-bytes'?: string | undefined; help?: boolean | undefined };
  try {
    values = parseArgs({
      args: argv,
      options: {
        socket: { type: 'string' },
        'state-dir': { type: 'string' },
        'max-frame-bytes': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
    }).values;
  } catch (err) {
    process.stderr.write(`rollout sandbox-host: ${(err as Error).message}\n\n${HELP}`);
    return 2;
  }
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  if (!values.socket || !values['state-dir']) {
    process.stderr.write(`rollout sandbox-host: --socket and --state-dir are required\n\n${HELP}`);
    return 2;
  }
  const code = await runSandboxHost({
    socketPath: values.socket,
    stateDir: values['state-dir'],
    ...(values['max-frame-bytes'] ? { maxFrameBytes: Number(values['max-frame-bytes']) } : {}),
  });
  // Sandbox processes are gone; do not wait for stray handles (pty reader threads).
  process.exit(code);
}
