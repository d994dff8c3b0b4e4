import { connect, createServer, type Socket } from 'node:net';

/**
 * A loopback TCP listener whose every connection is piped to a Unix socket — what the sandbox's
 * forwarder does — so that clients that only speak TCP (the official SDKs, on fetch) reach a proxy.
 */
export async function forwardTcp(socketPath: string): Promise<{ url: string; close(): Promise<void> }> {
  const open = new Set<Socket>();
  const server = createServer((c) => {
    const u = connect(socketPath);
    open.add(c).add(u);
    const drop = (): void => {
      c.destroy();
      u.destroy();
      open.delete(c);
      open.delete(u);
    };
    c.on('error', drop).on('close', drop);
    u.on('error', drop).on('close', drop);
    c.pipe(u).pipe(c);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`,
    async close() {
      for (const s of open) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
