import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { once } from 'node:events';
import { UdsChannel, type ChannelOptions } from '../../../src/ipc/uds-channel.js';
import { CancelledError, ProtocolError, TaskError } from '../../../src/errors.js';

let dir: string;
let server: net.Server;
const open: UdsChannel[] = [];

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ipc-'));
});
afterEach(async () => {
  await Promise.all(open.splice(0).map((c) => c.close()));
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  fs.rmSync(dir, { recursive: true, force: true });
});

/** A server answering with `serverOpts`; returns the client channel and the raw server socket. */
async function pair(serverOpts: ChannelOptions, clientOpts: ChannelOptions = {}): Promise<{ client: UdsChannel; serverSide: Promise<{ socket: net.Socket; channel: UdsChannel }> }> {
  const sock = path.join(dir, 's.sock');
  let resolveServer!: (v: { socket: net.Socket; channel: UdsChannel }) => void;
  const serverSide = new Promise<{ socket: net.Socket; channel: UdsChannel }>((r) => (resolveServer = r));
  server = net.createServer((socket) => {
    const channel = new UdsChannel(socket, serverOpts);
    open.push(channel);
    resolveServer({ socket, channel });
  });
  server.listen(sock);
  await once(server, 'listening');
  const client = await UdsChannel.connect(sock, clientOpts);
  open.push(client);
  return { client, serverSide };
}

describe('UdsChannel', () => {
  it('answers a request with the matching <type>.result reply', async () => {
    const { client } = await pair({ onRequest: (m) => ({ echo: m.text }) });
    const reply = await client.request({ type: 'echo', text: 'hi' });
    expect(reply).toMatchObject({ type: 'echo.result', echo: 'hi' });
  });

  it('matches concurrent replies to their requests by id', async () => {
    // 0–2 ms of delay per request only shuffles the order replies are written in (not synchronisation).
    const { client } = await pair({ onRequest: async (m) => { await new Promise((r) => setTimeout(r, (m.n as number) % 3)); return { n: m.n }; } });
    const replies = await Promise.all(Array.from({ length: 50 }, (_, n) => client.request({ type: 'n', n })));
    expect(replies.map((r) => r.n)).toEqual(Array.from({ length: 50 }, (_, n) => n));
  });

  it('rejects with the class the peer threw, rebuilt from serializeError', async () => {
    const { client } = await pair({ onRequest: () => { throw new TaskError('bad task', { code: 'BAD' }); } });
    const err = await client.request({ type: 'x' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TaskError);
    expect(err).toMatchObject({ code: 'BAD', message: 'bad task' });
  });

  it('rejects a request with IPC_TIMEOUT when no reply comes in time', async () => {
    const { client } = await pair({ onRequest: () => new Promise(() => {}) });
    await expect(client.request({ type: 'slow' }, { timeoutMs: 20 })).rejects.toMatchObject({ code: 'IPC_TIMEOUT' });
    expect(client.pendingCount).toBe(0);
  });

  it('rejects a request with CancelledError when its signal aborts', async () => {
    const { client } = await pair({ onRequest: () => new Promise(() => {}) });
    const ac = new AbortController();
    const p = client.request({ type: 'slow' }, { signal: ac.signal });
    ac.abort();
    await expect(p).rejects.toBeInstanceOf(CancelledError);
  });

  it('closes the connection with a ProtocolError on an oversize frame and rejects pending requests', async () => {
    const { client, serverSide } = await pair({ onRequest: () => new Promise(() => {}) }, { maxFrameBytes: 1024 });
    const p = client.request({ type: 'wait' });
    const { socket } = await serverSide;
    const header = Buffer.alloc(4);
    header.writeUInt32BE(10_000);
    socket.write(header);
    await expect(p).rejects.toBeInstanceOf(ProtocolError);
    expect(await client.closed).toMatchObject({ code: 'FRAME_TOO_LARGE' });
  });

  it('closes the connection with a ProtocolError on an undecodable frame instead of crashing', async () => {
    const { client, serverSide } = await pair({});
    const { socket } = await serverSide;
    socket.write(Buffer.from([0, 0, 0, 2, 0x82, 0xa4]));
    expect(await client.closed).toMatchObject({ code: 'UNDECODABLE' });
    expect(client.isOpen).toBe(false);
  });

  it('rejects pending requests with CHANNEL_CLOSED when the peer closes', async () => {
    let arrived!: () => void;
    const inFlight = new Promise<void>((r) => (arrived = r));
    const { client, serverSide } = await pair({ onRequest: () => (arrived(), new Promise(() => {})) });
    const p = client.request({ type: 'wait' });
    const { channel } = await serverSide;
    // The server holds the request unanswered: it is in flight when the peer closes.
    await inFlight;
    await channel.close();
    await expect(p).rejects.toMatchObject({ code: 'CHANNEL_CLOSED' });
    await expect(client.request({ type: 'after' })).rejects.toMatchObject({ code: 'CHANNEL_CLOSED' });
  });

  it('delivers messages without an id as notifications', async () => {
    let onNotification!: (m: unknown) => void;
    const notified = new Promise((r) => (onNotification = r));
    const { serverSide } = await pair({}, { onNotification });
    (await serverSide).channel.notify({ type: 'sandbox.lost', sandboxId: 's1' });
    expect(await notified).toEqual({ type: 'sandbox.lost', sandboxId: 's1' });
  });

  it('delivers a burst larger than the socket buffer in order, waiting for drain', async () => {
    const seen: number[] = [];
    const { client } = await pair({ onRequest: (m) => { seen.push(m.n as number); return {}; } });
    const blob = 'x'.repeat(64 * 1024);
    await Promise.all(Array.from({ length: 200 }, (_, n) => client.request({ type: 'n', n, blob })));
    expect(seen).toEqual(Array.from({ length: 200 }, (_, n) => n));
  });
});
