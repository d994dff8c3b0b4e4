import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const bin = join(ROOT, 'bin', 'rollout.js');

/** A `rollout <server command>` child process and the URL it said it listens on. */
export interface ServerProcess {
  readonly url: string;
  readonly child: ChildProcess;
  /** What it wrote to stderr so far (the last 64 KiB). */
  stderr(): string;
  /** SIGTERM, then waits for the exit (nothing when it has already exited). */
  stop(): Promise<void>;
}

/** The error a server process that exits before listening rejects with: its exit code and stderr. */
export type ServerExitError = Error & { code: number | null; stderr: string };

/** Every child started here and not yet gone: {@link stopServerProcesses} ends them, also one whose start timed out. */
const live = new Set<ChildProcess>();

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const gone = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await gone;
}

/**
 * Starts `rollout COMMAND ARGS` (`fake-llm`, `llm-serve`, ...) as a real child process and
 * resolves once it prints its `listening on URL` line; rejects with a {@link ServerExitError}
 * when it exits first.
 */
export async function startServerProcess(command: string, args: readonly string[]): Promise<ServerProcess> {
  const child = spawn(process.execPath, [bin, command, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(child);
  child.once('exit', () => live.delete(child));
  let err = '';
  child.stderr!.on('data', (c: Buffer) => {
    err = (err + c.toString()).slice(-65_536);
  });
  try {
    const url = await new Promise<string>((res, rej) => {
      let out = '';
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /listening on (http:\/\/\S+)/.exec(out);
        if (m?.[1]) res(m[1]);
      });
      child.once('exit', (code) => rej(Object.assign(new Error(`${command} exited with ${code}: ${err}`), { code, stderr: err })));
    });
    return { url, child, stderr: () => err, stop: () => stopChild(child) };
  } catch (e) {
    await stopChild(child);
    throw e;
  }
}

/** `rollout fake-llm ARGS`: the scripted policy server. */
export function startFakeLlmProcess(args: readonly string[]): Promise<ServerProcess> {
  return startServerProcess('fake-llm', args);
}

/** `rollout llm-serve ARGS`: the tiny real inference engine. */
export function startLlmServeProcess(args: readonly string[]): Promise<ServerProcess> {
  return startServerProcess('llm-serve', args);
}

/** Stops every server process this module started that is still running (for an `afterAll`). */
export async function stopServerProcesses(): Promise<void> {
  await Promise.all([...live].map(stopChild));
}
