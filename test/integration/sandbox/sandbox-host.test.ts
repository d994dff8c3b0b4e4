import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { spawn, type ChildProcess } from 'node:child_process';
import { UdsChannel } from '../../../src/ipc/uds-channel.js';
import { ProtocolError } from '../../../src/errors.js';

const BIN = path.resolve(import.meta.dirname, '../../../bin/rollout.js');
let dir: string;
let host: ChildProcess | null = null;

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sbx-host-'));
});
afterEach(async () => {
  if (host && host.exitCode === null && host.signalCode === null) {
    const exited = new Promise((r) => host!.once('exit', r));
    host.kill('SIGKILL');
    await exited;
  }
  host = null;
  fs.rmSync(dir, { recursive: true, force: true });
});

function run(args: string[]): ChildProcess {
  return spawn(process.execPath, [BIN, 'sandbox-host', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
}

async function startHost(): Promise<{ sock: string; channel: UdsChannel }> {
  const sock = path.join(dir, 'h.sock');
  host = run(['--socket', sock, '--state-dir', path.join(dir, 'state')]);
  await new Promise<void>((resolve) => readline.createInterface({ input: host!.stdout! }).on('line', (l) => l.startsWith('ready ') && resolve()));
  return { sock, channel: await UdsChannel.connect(sock) };
}

describe('rollout sandbox-host', () => {
  it('exits with 2 and usage when --socket or --state-dir is missing', async () => {
    host = run([]);
    let err = '';
    host.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    const code = await new Promise((r) => host!.once('exit', r));
    expect(code).toBe(2);
    expect(err).toMatch(/--socket and --state-dir are required/);
  });

  it('refuses sandbox requests before host.hello', async () => {
    const { channel } = await startHost();
    await expect(channel.request({ type: 'sandbox.close', sandboxId: 'x' })).rejects.toMatchObject({ code: 'NO_HELLO' });
    await channel.close();
  });

  it('answers a malformed request with a ProtocolError and keeps the connection', async () => {
    const { channel } = await startHost();
    const err = await channel.request({ type: 'sandbox.bash', sandboxId: 'x' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProtocolError);
    expect(err).toMatchObject({ code: 'BAD_REQUEST' });
    expect(await channel.request({ type: 'host.hello', runtimeId: 't', ownerPid: process.pid, ownerStart: null })).toMatchObject({ pid: host!.pid });
    await channel.close();
  });

  it('exits and removes its socket when the runtime connection closes', async () => {
    const { sock, channel } = await startHost();
    await channel.request({ type: 'host.hello', runtimeId: 't', ownerPid: process.pid, ownerStart: null });
    const exited = new Promise((r) => host!.once('exit', r));
    await channel.close();
    expect(await exited).toBe(0);
    expect(fs.existsSync(sock)).toBe(false);
  });
});
