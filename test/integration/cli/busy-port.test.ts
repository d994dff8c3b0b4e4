import { execFile } from 'node:child_process';
import { createServer, type Server } from 'node:net';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/** A server command on a busy port says so in one line and exits 1 (#30), not with a stack trace. */

const repo = fileURLToPath(new URL('../../../', import.meta.url));
const bin = join(repo, 'bin', 'rollout.js');
let holder: Server;
let port: number;

beforeAll(async () => {
  holder = createServer();
  await new Promise<void>((r) => holder.listen(0, '127.0.0.1', r));
  port = (holder.address() as AddressInfo).port;
});
afterAll(async () => {
  await new Promise((r) => holder.close(r));
});

function rollout(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((res) => {
    execFile(process.execPath, [bin, ...args], { cwd: repo, timeout: 120_000 }, (err, stdout, stderr) => res({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }));
  });
}

describe('a server command on a busy port', { timeout: 150_000 }, () => {
  it.each([
    ['llm-serve', ['llm-serve', '--tiny']],
    ['fake-llm', ['fake-llm']],
  ])('%s exits 1 with one line naming the address and what to do', async (name, args) => {
    const r = await rollout([...args, '--port', String(port)]);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(`rollout ${name}: cannot listen on 127.0.0.1:${port}: the port is already in use (stop what holds it, or pick another --port; --port 0 takes a free one)\n`);
    expect(r.stdout).not.toContain('listening on');
  });
});
