import { afterEach, describe, expect, it } from 'vitest';
import net from 'node:net';
import { checkExposure, isLoopbackHost } from '../../../src/server/exposure.js';
import { startHarness, type Harness } from './harness.js';

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

/** One raw HTTP/1.1 exchange to 127.0.0.1:port with exactly the given Host; resolves with the status line. */
function rawStatus(port: number, method: string, path: string, host: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1', () => s.write(`${method} ${path} HTTP/1.1\r\nHost: ${host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`));
    let buf = '';
    s.on('data', (d) => (buf += d));
    s.on('error', reject);
    s.on('close', () => resolve(buf.split('\r\n')[0] ?? ''));
  });
}

describe('one loopback predicate for the token rule and the Host pin (#28 §5.8)', () => {
  it.each([
    ['127.0.0.1', true],
    ['127.8.9.10', true],
    ['localhost', true],
    ['LOCALHOST.', true],
    ['::1', true],
    ['[::1]', true],
    ['0:0:0:0:0:0:0:1', true],
    ['[0:0:0:0:0:0:0:1]', true],
    ['::ffff:127.0.0.1', true],
    ['[::ffff:127.0.0.1]', true],
    ['::ffff:7f00:1', true],
    ['0.0.0.0', false],
    ['::', false],
    ['::ffff:10.0.0.1', false],
    ['10.0.0.1', false],
    ['128.0.0.1', false],
    ['evil.example', false],
    ['localhost.evil.example', false],
    ['127.0.0.1.evil.example', false],
  ])('%s is loopback: %s', (host, loopback) => {
    expect(isLoopbackHost(host)).toBe(loopback);
    // The token rule follows the same predicate: a loopback bind needs no token.
    expect(checkExposure(host, undefined, false).kind).toBe(loopback ? 'ok' : 'refused');
  });

  for (const bind of ['::ffff:127.0.0.1', '0:0:0:0:0:0:0:1']) {
    it(`pins Host to loopback names on a service bound to ${bind} without a token`, async () => {
      h = await startHarness({ host: bind }, { startStopped: true });
      const port = Number(new URL(h.url).port);
      const connectTo = bind === '::ffff:127.0.0.1' ? '127.0.0.1' : '::1';
      const statusOf = (method: string, path: string, host: string): Promise<string> =>
        new Promise((resolve, reject) => {
          const s = net.connect(port, connectTo, () => s.write(`${method} ${path} HTTP/1.1\r\nHost: ${host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`));
          let buf = '';
          s.on('data', (d) => (buf += d));
          s.on('error', reject);
          s.on('close', () => resolve(buf.split('\r\n')[0] ?? ''));
        });
      expect(await statusOf('POST', '/start', 'evil.example')).toMatch(/^HTTP\/1.1 403/);
      expect(await statusOf('POST', '/start', `evil.example:${port}`)).toMatch(/^HTTP\/1.1 403/);
      // Refused before it reached the route: the service is still stopped.
      expect(h.runtimes).toHaveLength(0);
      expect(await statusOf('GET', '/healthz', `[${bind}]:${port}`)).toMatch(/^HTTP\/1.1 200/);
      expect(await statusOf('GET', '/healthz', `localhost:${port}`)).toMatch(/^HTTP\/1.1 200/);
    });
  }

  it('still pins Host on a 127.0.0.1 service', async () => {
    h = await startHarness({}, { startStopped: true });
    const port = Number(new URL(h.url).port);
    expect(await rawStatus(port, 'POST', '/start', 'evil.example')).toMatch(/^HTTP\/1.1 403/);
    expect(await rawStatus(port, 'GET', '/healthz', `[::ffff:127.0.0.1]:${port}`)).toMatch(/^HTTP\/1.1 200/);
  });
});
