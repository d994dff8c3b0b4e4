import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { startHarness, post, task, heldTask, Inbox, type Harness } from './harness.js';

let h: Harness;
const sockets: WebSocket[] = [];
afterEach(async () => {
  for (const s of sockets.splice(0)) s.terminate();
  await h?.close();
});

interface Client {
  ws: WebSocket;
  msgs: any[];
  inbox: Inbox;
  send(m: unknown): void;
  events(sub?: string): any[];
  /** Resolves once a message of `type` has arrived. */
  got(type: string): Promise<void>;
  /** Resolves once `n` events of `sub` have arrived. */
  gotEvents(n: number, sub?: string): Promise<void>;
}

async function connect(url: string, opts: { token?: string; headers?: Record<string, string> } = {}): Promise<Client> {
  const wsUrl = url.replace('http', 'ws') + '/v1/events' + (opts.token ? `?token=${opts.token}` : '');
  const ws = new WebSocket(wsUrl, { headers: opts.headers });
  sockets.push(ws);
  const inbox = new Inbox();
  ws.on('message', (d) => inbox.push(JSON.parse(d.toString())));
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  await inbox.some((m) => m.type === 'hello');
  const events = (sub = 'default'): any[] => inbox.msgs.filter((m) => m.type === 'event' && m.sub === sub).map((m) => m.event);
  return {
    ws,
    msgs: inbox.msgs,
    inbox,
    send: (m) => ws.send(JSON.stringify(m)),
    events,
    got: (type) => inbox.some((m) => m.type === type),
    gotEvents: (n, sub = 'default') => inbox.until(() => events(sub).length >= n),
  };
}

/** Runs one finish-only rollout through /process; answers the runtime's last seq after it. */
async function runOne(h: Harness): Promise<number> {
  expect((await post(`${h.url}/process`, { instance: task() })).body.outcome).toBe('completed');
  return lastSeq(h);
}

/** The newest seq of the current runtime, read from its own retained stream. */
async function lastSeq(h: Harness): Promise<number> {
  let last = 0;
  const ac = new AbortController();
  // The retained events are queued at subscription; aborting at once ends the stream behind them.
  const events = h.rt().events({ after: 0, signal: ac.signal });
  ac.abort();
  for await (const e of events) last = e.type === 'gap' ? e.to : e.seq;
  return last;
}

describe('WebSocket /v1/events', () => {
  it('greets a client with the epoch and the latest seq', async () => {
    h = await startHarness();
    const c = await connect(h.url);
    expect(c.msgs[0]).toMatchObject({ type: 'hello', epoch: 1 });
  });

  it('streams every event with its seq to a firehose subscriber', async () => {
    h = await startHarness();
    const c = await connect(h.url);
    c.send({ type: 'subscribe' });
    await c.got('subscribed');
    const last = await runOne(h);
    await c.gotEvents(last);
    const evs = c.events();
    expect(evs.map((e) => e.seq)).toEqual(Array.from({ length: last }, (_, i) => i + 1));
    expect(evs[0].type).toBe('rollout.submitted');
    expect(evs.filter((e) => e.type === 'rollout.result')).toHaveLength(1);
  });

  it('delivers only the subscribed rollout’s events', async () => {
    h = await startHarness();
    const c = await connect(h.url);
    c.send({ type: 'subscribe', sub: 'one', rollout: 'r-b' });
    await c.got('subscribed');
    await post(`${h.url}/v1/rollouts`, { instance: task(), id: 'r-a' });
    await post(`${h.url}/v1/rollouts`, { instance: task(), id: 'r-b' });
    await c.inbox.until(() => c.events('one').some((e) => e.type === 'rollout.result'));
    await h.until(() => h.rt().get('r-a')?.result != null);
    expect(new Set(c.events('one').map((e) => e.rolloutId))).toEqual(new Set(['r-b']));
  });

  it('delivers only the subscribed group’s events', async () => {
    h = await startHarness();
    const b = await post(`${h.url}/v1/batches`, { instances: [heldTask()], n: 2 });
    const other = await post(`${h.url}/v1/batches`, { instances: [heldTask()], n: 2 });
    await h.until(() => h.rt().list({ state: 'acting' }).length === 4);
    const c = await connect(h.url);
    c.send({ type: 'subscribe', sub: 'g', group: b.body.groups[0].group_id, after: 0 });
    // Replayed from the start: each member's submission and its way into `acting`.
    await c.inbox.until(() => c.events('g').filter((e) => e.type === 'rollout.state' && e.state === 'acting').length === 2);
    const submitted = c.events('g').filter((e) => e.type === 'rollout.submitted');
    expect(submitted.map((e) => e.rolloutId)).toEqual(b.body.rollout_ids);
    expect(other.body.rollout_ids.some((id: string) => c.events('g').some((e) => e.rolloutId === id))).toBe(false);
  });

  it('resumes after a cursor without gaps', async () => {
    h = await startHarness();
    let last = 0;
    for (let i = 0; i < 3; i++) last = await runOne(h);
    const c = await connect(h.url);
    c.send({ type: 'subscribe', after: 4 });
    await c.gotEvents(last - 4);
    expect(c.events().map((e) => e.seq)).toEqual(Array.from({ length: last - 4 }, (_, i) => i + 5));
    expect(c.msgs.some((m) => m.type === 'gap')).toBe(false);
  });

  it('sends a gap when the cursor is older than the retention', async () => {
    h = await startHarness({}, { retention: 3 });
    let last = 0;
    for (let i = 0; i < 3; i++) last = await runOne(h);
    const c = await connect(h.url);
    c.send({ type: 'subscribe', after: 0 });
    await c.gotEvents(3);
    expect(c.msgs.find((m) => m.type === 'gap')).toEqual({ type: 'gap', sub: 'default', from: 1, to: last - 3, reason: 'retention' });
    expect(c.events().map((e) => e.seq)).toEqual([last - 2, last - 1, last]);
  });

  it('answers an app-level ping with a pong', async () => {
    h = await startHarness();
    const c = await connect(h.url);
    c.send({ type: 'ping', nonce: 7 });
    await c.got('pong');
    expect(c.msgs.find((m) => m.type === 'pong')).toEqual({ type: 'pong', nonce: 7 });
  });

  it('sends heartbeats with the latest seq', async () => {
    h = await startHarness({ heartbeatMs: 20 });
    const c = await connect(h.url);
    await h.clock.advance(19);
    expect(c.msgs.some((m) => m.type === 'heartbeat')).toBe(false);
    await h.clock.advance(1);
    await c.got('heartbeat');
    expect(c.msgs.find((m) => m.type === 'heartbeat')).toEqual({ type: 'heartbeat', ts: h.clock.now(), seq: -1 });
  });

  it('answers a malformed message with an error naming the field and keeps the connection', async () => {
    h = await startHarness();
    const c = await connect(h.url);
    c.send({ type: 'subscribe', after: 'yesterday' });
    c.ws.send('{not json');
    await c.inbox.until((ms) => ms.filter((m) => m.type === 'error').length === 2);
    expect(c.msgs.find((m) => m.type === 'error').error.issues[0].path).toBe('after');
    expect(c.ws.readyState).toBe(WebSocket.OPEN);
  });

  it('stops delivering after unsubscribe', async () => {
    h = await startHarness();
    const c = await connect(h.url);
    c.send({ type: 'subscribe' });
    c.send({ type: 'unsubscribe', sub: 'default' });
    await c.got('unsubscribed');
    await runOne(h);
    c.send({ type: 'ping' });
    await c.got('pong');
    expect(c.events()).toEqual([]);
  });

  it('refuses an upgrade without the token when one is set', async () => {
    h = await startHarness({ token: 'tok' });
    await expect(connect(h.url)).rejects.toThrow(/401/);
    const c = await connect(h.url, { token: 'tok' });
    expect(c.msgs[0].type).toBe('hello');
  });

  it('refuses a browser page of another origin when no token is set', async () => {
    h = await startHarness();
    await expect(connect(h.url, { headers: { origin: 'https://evil.example' } })).rejects.toThrow(/403/);
    const own = await connect(h.url, { headers: { origin: h.url } });
    expect(own.msgs[0].type).toBe('hello');
  });

  it('pushes backend load snapshots', async () => {
    h = await startHarness({ backendsIntervalMs: 10 }, { backends: [{ address: 'http://127.0.0.1:9001', id: 'b1' }] });
    const c = await connect(h.url);
    await h.clock.advance(10);
    await c.got('backends');
    expect(c.msgs.find((m) => m.type === 'backends').backends).toMatchObject([{ id: 'b1', inFlight: 0 }]);
  });

  it('drops events for a client over the soft limit and reports them as one gap', async () => {
    h = await startHarness({ wsSoftLimitBytes: 1, heartbeatMs: 60_000 });
    const c = await connect(h.url);
    c.send({ type: 'subscribe' });
    await c.got('subscribed');
    // Filling a loopback socket's kernel buffers takes megabytes and is timing-dependent; the hub
    // decides on `bufferedAmount` alone, so the test holds that value up on the server's socket.
    const serverSide = [...(h.service as any).hub.conns][0];
    Object.defineProperty(serverSide.ws, 'bufferedAmount', { get: () => 10, configurable: true });
    const first = await runOne(h);
    Object.defineProperty(serverSide.ws, 'bufferedAmount', { get: () => 0, configurable: true });
    const last = await runOne(h);
    await c.gotEvents(last - first);
    expect(c.msgs.find((m) => m.type === 'gap')).toEqual({ type: 'gap', sub: 'default', from: 1, to: first, reason: 'slow-client' });
    expect(c.events().map((e) => e.seq)).toEqual(Array.from({ length: last - first }, (_, i) => first + 1 + i));
  });

  it('closes a client that stays over the soft limit for wsSlowCloseMs with 1008 slow consumer', async () => {
    h = await startHarness({ wsSoftLimitBytes: 1, heartbeatMs: 10, wsSlowCloseMs: 30_000 });
    const c = await connect(h.url);
    const closed = new Promise<{ code: number; reason: string }>((resolve) => c.ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })));
    const serverSide = [...(h.service as any).hub.conns][0];
    Object.defineProperty(serverSide.ws, 'bufferedAmount', { get: () => 10, configurable: true });
    // Slow from the first heartbeat on; still open one tick before the limit, closed at it.
    await h.clock.advance(10);
    await h.clock.advance(30_000 - 10);
    expect(c.ws.readyState).toBe(WebSocket.OPEN);
    await h.clock.advance(10);
    expect(await closed).toEqual({ code: 1008, reason: 'slow consumer' });
  });

  it('ends subscriptions with an error message on /stop', async () => {
    h = await startHarness();
    const c = await connect(h.url);
    c.send({ type: 'subscribe' });
    await c.got('subscribed');
    await post(`${h.url}/stop`);
    await c.got('error');
    expect(c.msgs.find((m) => m.type === 'error').error.code).toBe('STOPPED');
  });

  it('replays a subscription that carries an older epoch from the new runtime’s first event', async () => {
    h = await startHarness();
    let old = 0;
    for (let i = 0; i < 2; i++) old = await runOne(h);
    await post(`${h.url}/stop`);
    await post(`${h.url}/start`);
    const last = await runOne(h);
    const c = await connect(h.url);
    c.send({ type: 'subscribe', after: old, epoch: 1 });
    await c.gotEvents(last);
    expect(c.msgs.find((m) => m.type === 'subscribed')).toMatchObject({ epoch: 2, after: 0 });
    expect(c.events().map((e) => e.seq)).toEqual(Array.from({ length: last }, (_, i) => i + 1));
  });
});
