import { request, type Agent } from 'node:http';
import type { Socket } from 'node:net';

/** Sockets already given the EPIPE-swallowing listener: a keep-alive agent reuses them across requests. */
const quieted = new WeakSet<Socket>();

/** One HTTP exchange over a Unix socket: status, headers and body text. */
export function udsRequest(socketPath: string, method: string, path: string, opts: { token?: string; body?: string | Buffer; agent?: Agent; headers?: Record<string, string> } = {}): Promise<{ status: number; headers: Record<string, unknown>; text: string }> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (opts.token !== undefined) headers.authorization = `Bearer ${opts.token}`;
    Object.assign(headers, opts.headers);
    const req = request({ socketPath, method, path, headers, ...(opts.agent ? { agent: opts.agent } : {}) }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    // A server that refuses a large body early may close while we still write it (EPIPE after the answer).
    req.on('socket', (s) => {
      if (quieted.has(s)) return;
      quieted.add(s);
      s.on('error', () => {});
    });
    if (opts.body !== undefined) req.write(opts.body);
    req.end();
  });
}

/** A chat request body. */
export function chatBody(messages: unknown[], extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ model: 'x', messages, ...extra });
}
