import { afterEach, describe, expect, it } from 'vitest';
import net from 'node:net';
import { startHarness, post, get, task, type Harness } from './harness.js';

let h: Harness | undefined;
const sockets: net.Socket[] = [];
afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  await h?.close();
  h = undefined;
});

/** Opens `n` TCP connections to the service that send nothing (or `first`); resolves once all are connected, each with a promise of its close. */
async function silentSockets(url: string, n: number, first?: string): Promise<Promise<void>[]> {
  const port = Number(new URL(url).port);
  const closed: Promise<void>[] = [];
  const connected: Promise<void>[] = [];
  for (let i = 0; i < n; i++) {
    const s = net.connect(port, '127.0.0.1');
    sockets.push(s);
    s.on('error', () => undefined);
    closed.push(new Promise((resolve) => s.once('close', () => resolve())));
    connected.push(
      new Promise((resolve) =>
        s.once('connect', () => {
          if (first) s.write(first);
          resolve();
        }),
      ),
    );
  }
  await Promise.all(connected);
  return closed;
}

describe('pre-auth connection exhaustion (#28 §5.7)', () => {
  it('at the connection cap, a new connection closes the one idle longest: /healthz and /process still answer', async () => {
    h = await startHarness({ maxConnections: 20, connectionIdleMs: 600_000 });
    const idle = await silentSockets(h.url, 100);
    let closed = 0;
    for (const c of idle) void c.then(() => closed++);
    // Each of the last 80 evicted one older silent connection; the idle timeout is far off.
    await expect.poll(() => closed).toBe(80);
    expect(h.service.connections).toMatchObject({ evicted: 80, timedOut: 0, refused: 0 });
    expect((await get(`${h.url}/healthz`)).status).toBe(200);
    const r = await post(`${h.url}/process`, { instance: task(), job_id: 'after-flood' });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ outcome: 'completed' });
    expect(h.service.connections.open).toBeLessThanOrEqual(20);
  });

  it('closes connections that send nothing, or half their headers, after connectionIdleMs; a request in progress is not cut', async () => {
    h = await startHarness({ connectionIdleMs: 300 });
    const pending = post(`${h.url}/process`, { instance: task({}, 10_000), job_id: 'held' });
    await h.until(() => h!.rt().list()[0]?.state === 'acting');
    const silent = await silentSockets(h.url, 30);
    const loris = await silentSockets(h.url, 5, 'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ');
    await Promise.all([...silent, ...loris]);
    expect(h.service.connections.timedOut).toBeGreaterThanOrEqual(35);
    // Every silent socket outlived connectionIdleMs; the /process connection was busy all along.
    expect(h.rt().list()[0]?.state).toBe('acting');
    await h.clock.advance(10_000);
    const r = await pending;
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ outcome: 'completed' });
    expect((await get(`${h.url}/healthz`)).status).toBe(200);
  });
});
