import { readFileSync } from 'node:fs';
import { didYouMean } from './args.js';
import { packagePath } from '../package-root.js';

/**
 * The `rollout` command: a thin dispatcher. Each subcommand lives in `commands/<name>.ts` and
 * exports `run(argv): Promise<number>`; it is imported only when called, so `rollout
 * sandbox-host` does not load the HTTP server and vice versa.
 */
const commands: Record<string, { summary: string; load: () => Promise<{ run(argv: string[]): Promise<number> }> }> = {
  run: { summary: 'run a task file end to end and print a summary (the main job)', load: () => import('./commands/run.js') },
  serve: { summary: 'HTTP + WebSocket service (ProRL-compatible)', load: () => import('./commands/serve.js') },
  view: { summary: "open a finished run's output directory in the visualizer (read-only)", load: () => import('./commands/view.js') },
  image: { summary: 'import, list, remove and prune task images (OCI layouts, docker archives)', load: () => import('./commands/image.js') },
  harness: { summary: 'install, list and remove agent CLIs for harness presets (codex, claude-code, …)', load: () => import('./commands/harness.js') },
  worker: { summary: 'a cluster node running rollouts from Redis (with serve --redis)', load: () => import('./commands/worker.js') },
  'sandbox-host': { summary: 'a process that owns many sandboxes (started by the runtime)', load: () => import('./commands/sandbox-host.js') },
  'fake-llm': { summary: 'a fake inference server with the real tokenizer', load: () => import('./commands/fake-llm.js') },
  'llm-serve': { summary: 'serve a GGUF model with node-llama-cpp over the same protocols', load: () => import('./commands/llm-serve.js') },
  doctor: { summary: 'pre-flight checks: sandbox driver, cgroups, disk, and each backend', load: () => import('./commands/doctor.js') },
};

/** The package's version, from package.json beside the sources. */
function version(): string {
  const pkg = JSON.parse(readFileSync(packagePath('package.json'), 'utf8')) as { version: string };
  return pkg.version;
}

function usage(): string {
  const lines = Object.entries(commands).map(([name, c]) => `  ${name.padEnd(14)} ${c.summary}`);
  return `usage: rollout <command> [options]\n\ncommands:\n${lines.join('\n')}\n\nrollout <command> --help for its options\n`;
}

/** Runs the command line; returns the exit code. */
export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h') {
    process.stdout.write(usage());
    return name ? 0 : 2;
  }
  if (name === '--version' || name === '-v') {
    process.stdout.write(`rollout-runtime ${version()}\n`);
    return 0;
  }
  const cmd = commands[name];
  if (!cmd) {
    const guess = didYouMean(name, Object.keys(commands));
    process.stderr.write(`rollout: unknown command '${name}'${guess ? ` (did you mean '${guess}'?)` : ''}\n\n${usage()}`);
    return 2;
  }
  const mod = await cmd.load();
  return mod.run(rest);
}
