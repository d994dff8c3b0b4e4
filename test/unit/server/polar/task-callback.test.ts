import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import http from 'node:http';
import { once } from 'node:events';
import { ManualClock } from '../../../../src/clock.js';
import { CALLBACK_SPACING_MS, postCallback } from '../../../../src/server/polar/task-callback.js';
import type { TaskStatus } from '../../../../src/server/polar/polar-models.js';

// The callback's retry rule against a real listener on loopback: which answers are retried
// (408, 425, 429, 5xx: three attempts, 5 s apart on the clock) and which end it at once (any
// other 4xx, a redirect, which is not followed).
const body = { task_id: 't', status: 'completed', total_sessions: 0, completed_sessions: 0, results: [] } as unknown as TaskStatus;

let listener: http.Server;
let url: string;
let answer: number;
let seen: { method: string; body: string }[];

beforeEach(async () => {
  seen = [];
  listener = http.createServer((req, res) => {
    let text = '';
    req.on('data', (d) => (text += d));
    req.on('end', () => {
      seen.push({ method: req.method ?? '', body: text });
      res.writeHead(answer, answer >= 300 && answer < 400 ? { location: `${url}/elsewhere` } : {}).end();
    });
  });
  listener.listen(0, '127.0.0.1');
  await once(listener, 'listening');
  url = `http://127.0.0.1:${(listener.address() as { port: number }).port}/cb`;
});

afterEach(async () => {
  listener.closeAllConnections();
  await new Promise((r) => listener.close(r));
});

/** Runs one delivery, moving the clock over each 5 s spacing as soon as it is armed. */
async function deliver(): Promise<Awaited<ReturnType<typeof postCallback>>> {
  const clock = new ManualClock();
  let done = false;
  const p = postCallback(url, body, { clock }).finally(() => (done = true));
  for (;;) {
    await expect.poll(() => done || clock.pending > 0, { timeout: 10_000, interval: 5 }).toBe(true);
    if (done) return p;
    await clock.advance(CALLBACK_SPACING_MS);
  }
}

describe('postCallback', () => {
  for (const status of [408, 425, 429, 500, 502, 503]) {
    it(`retries a ${status} three times in all, then reports it undelivered`, async () => {
      answer = status;
      expect(await deliver()).toEqual({ delivered: false, attempts: 3, last: status });
      expect(seen).toHaveLength(3);
      expect(seen.every((s) => s.method === 'POST' && JSON.parse(s.body).task_id === 't')).toBe(true);
    });
  }

  for (const status of [400, 401, 404, 410, 422, 302]) {
    it(`stops at once on a ${status}`, async () => {
      answer = status;
      expect(await deliver()).toEqual({ delivered: false, attempts: 1, last: status });
      // A redirect is not followed: the listener saw one POST, to the callback URL.
      expect(seen).toHaveLength(1);
    });
  }

  it('delivers on a 2xx at the first attempt', async () => {
    answer = 204;
    expect(await deliver()).toEqual({ delivered: true, attempts: 1, last: 204 });
    expect(JSON.parse(seen[0]!.body)).toEqual(body);
  });
});
