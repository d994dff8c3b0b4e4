import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const bin = join(fileURLToPath(new URL('../../', import.meta.url)), 'bin', 'rollout.js');

/** A `rollout fake-llm` child process and the URL it said it listens on. */
export interface FakeLlmProcess {
  readonly url: string;
  readonly child: ChildProcess;
  /** SIGTERM, then waits for the exit (nothing when it has already exited). */
  stop(): Promise<void>;
}

/**
 * Starts `rollout fake-llm ARGS` as a real child process and resolves once it prints its
 * `listening on URL` line; rejects with its output when it exits first.
 */
export async function startFakeLlmProcess(args: readonly string[]): Promise<FakeLlmProcess> {
  const child = spawn(process.execPath, [bin, 'fake-llm', ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  const stop = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    await gone;
  };
  try {
    const url = await new Promise<string>((res, rej) => {
      let buf = '';
      child.stdout?.on('data', (d: Buffer) => {
        buf += d.toString();
        const m = /listening on (http:\/\/\S+)/.exec(buf);
        if (m?.[1]) res(m[1]);
      });
      child.once('exit', () => rej(new Error(`fake-llm exited: ${buf}`)));
    });
    return { url, child, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
