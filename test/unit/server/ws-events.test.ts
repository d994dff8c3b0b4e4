import { ManualClock } from '../../../src/runtime/clock.js';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { startHarness, post, mathInstance, waitFor, type Harness } from './harness.js';

let h: Harness;
const sockets: WebSocket[] = [];
afterEach(async () => {
  for (const s of sockets.splice(0)) s.terminate();
  await h?.close();
});

interface Client {
  ws: WebSocket;
  msgs: any[];
  send(m: unknown): void;
  events(sub?: string): any[];
}

async function connect(url: string, opts: { token?: string; headers?: Record<string, string> } = {}): Promise<Client> {
  const wsUrl = url.replace('http', 'ws') + '/v1/events' + (opts.token ? `?token=${opts.token}` : '');
  const ws = new WebSocket(wsUrl, { headers: opts.headers });
  sockets.push(ws);
  const msgs: any[] = [];
  ws.on('message', (d) => msgs.push(JSON.parse(d.toString())));
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  await waitFor(() => msgs.some((m) => m.type === 'hello'));
  return {
    ws,
    msgs,
    send: (m) => ws.send(JSON.stringify(m)),
    events: (sub = 'default') => msgs.filter((m) => m.type === 'event' && m.sub === sub).map((m) => m.event),
  };
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
    await waitFor(() => c.msgs.some((m) => m.type === 'subscribed'));
    await post(`${h.url}/process`, { instance: mathInstance() });
    await waitFor(() => c.events().some((e) => e.type === 'rollout.result'));
    const seqs = c.events().map((e) => e.seq);
    expect(seqs).toEqual([1, 2, 3]);
  });

  it('delivers only the subscribed rollout’s events', async () => {
    h = await startHarness();
    const c = await connect(h.url);
    c.send({ type: 'subscribe', sub: 'one', rollout: 'r-b' });
    await waitFor(() => c.msgs.some((m) => m.type === 'subscribed'));
    await post(`${h.url}/v1/rollouts`, { instance: mathInstance(), id: 'r-a' });
    await post(`${h.url}/v1/rollouts`, { instance: mathInstance(), id: 'r-b' });
    await waitFor(() => c.events('one').some((e) => e.type === 'rollout.result'));
    expect(new Set(c.events('one').map((e) => e.rolloutId))).toEqual(new Set(['r-b']));
  });

  it('delivers only the subscribed group’s events', async () => {
    h = await startHarness();
    const b = await post(`${h.url}/v1/batches`, { instances: [mathInstance({ fake: { hold: true } })], n: 2 });
    const other = await post(`${h.url}/v1/batches`, { instances: [mathInstance({ fake: { hold: true } })], n: 2 });
    const c = await connect(h.url);
    c.send({ type: 'subscribe', sub: 'g', group: b.body.groups[0].group_id, after: 0 });
    await waitFor(() => c.events('g').length === 2);
    expect(c.events('g').map((e) => e.rolloutId)).toEqual(b.body.rollout_ids);
    expect(other.body.rollout_ids.some((id: string) => c.events('g').some((e) => e.rolloutId === id))).toBe(false);
  });

  it('resumes after a cursor without gaps', async () => {
    h = await startHarness();
    for (let i = 0; i < 3; i++) await post(`${h.url}/process`, { instance: mathInstance() });
    const c = await connect(h.url);
    c.send({ type: 'subscribe', after: 4 });
    await waitFor(() => c.events().length === 5);
    expect(c.events().map((e) => e.seq)).toEqual([5, 6, 7, 8, 9]);
  });

  it('sends a gap when the cursor is older than the retention', async () => {
    h = await startHarness({}, { retention: 3 });
    for (let i = 0; i < 3; i++) await post(`${h.url}/process`, { instance: mathInstance() });
    const c = await connect(h.url);
    c.send({ type: 'subscribe', after: 0 });
    await waitFor(() => c.events().length === 3);
    expect(c.msgs.find((m) => m.type === 'gap')).toEqual({ type: 'gap', sub: 'default', from: 1, to: 6, reason: 'retention' });
    expect(c.events().map((e) => e.seq)).toEqual([7, 8, 9]);
  });

  it('answers an app-level ping with a pong', async () => {
    h = await startHarness();
    const c = await connect(h.url);
    c.send({ type: 'ping', nonce: 7 });
    await waitFor(() => c.msgs.some((m) => m.type === 'pong'));
    expect(c.msgs.find((m) => m.type === 'pong')).toEqual({ type: 'pong', nonce: 7 });
  });

  it('sends heartbeats with the latest seq', async () => {
    h = await startHarness({ heartbeatMs: 20 });
    const c = await connect(h.url);
    await waitFor(() => c.msgs.some((m) => m.type === 'heartbeat'));
    expect(c.msgs.find((m) => m.type === 'heartbeat')).toMatchObject({ seq: -1 });
  });

  it('answers a malformed message with an error naming the field and keeps the connection', async () => {
    h = await startHarness();
    const c = await connect(h.url);
    c.send({ type: 'subscribe', after: 'yesterday' });
    c.ws.send('{not json');
    await waitFor(() => c.msgs.filter((m) => m.type === 'error').length === 2);
    expect(c.msgs.find((m) => m.type === 'error').error.issues[0].path).toBe('after');
    expect(c.ws.readyState).toBe(WebSocket.OPEN);
  });

  it('stops delivering after unsubscribe', async () => {
    h = await startHarness();
    const c = await connect(h.url);
    c.send({ type: 'subscribe' });
    c.send({ type: 'unsubscribe', sub: 'default' });
    await waitFor(() => c.msgs.some((m) => m.type === 'unsubscribed'));
    await post(`${h.url}/process`, { instance: mathInstance() });
    c.send({ type: 'ping' });
    await waitFor(() => c.msgs.some((m) => m.type === 'pong'));
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
    await waitFor(() => c.msgs.some((m) => m.type === 'backends'));
    expect(c.msgs.find((m) => m.type === 'backends').backends).toMatchObject([{ id: 'b1', inFlight: 0 }]);
  });

  it('drops events for a client over the soft limit and reports them as one gap', async () => {
    h = await startHarness({ wsSoftLimitBytes: 1, heartbeatMs: 60_000 });
    const c = await connect(h.url);
    c.send({ type: 'subscribe' });
    await waitFor(() => c.msgs.some((m) => m.type === 'subscribed'));
    // Filling a loopback socket's kernel buffers takes megabytes and is timing-dependent; the hub
    // decides on `bufferedAmount` alone, so the test holds that value up on the server's socket.
    const serverSide = [...(h.service as any).hub.conns][0];
    Object.defineProperty(serverSide.ws, 'bufferedAmount', { get: () => 10, configurable: true });
    await post(`${h.url}/process`, { instance: mathInstance() });
    Object.defineProperty(serverSide.ws, 'bufferedAmount', { get: () => 0, configurable: true });
    await post(`${h.url}/process`, { instance: mathInstance() });
    await waitFor(() => c.events().length === 3);
    expect(c.msgs.find((m) => m.type === 'gap')).toEqual({ type: 'gap', sub: 'default', from: 1, to: 3, reason: 'slow-client' });
    expect(c.events().map((e) => e.seq)).toEqual([4, 5, 6]);
  });

  it('closes a client that stays over the soft limit for wsSlowCloseMs with 1008 slow consumer', async () => {
    const clock = new ManualClock(1_000_000);
    h = await startHarness({ wsSoftLimitBytes: 1, heartbeatMs: 10, wsSlowCloseMs: 30_000 }, { clock });
    const c = await connect(h.url);
    const closed = new Promise<{ code: number; reason: string }>((resolve) => c.ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })));
    const serverSide = [...(h.service as any).hub.conns][0];
    Object.defineProperty(serverSide.ws, 'bufferedAmount', { get: () => 10, configurable: true });
    await waitFor(() => serverSide.slowSince !== null);
    expect(c.ws.readyState).toBe(WebSocket.OPEN);
    await clock.advance(30_000);
    expect(await closed).toEqual({ code: 1008, reason: 'slow consumer' });
  });

  it('ends subscriptions with an error message on /stop', async () => {
    h = await startHarness();
    const c = await connect(h.url);
    c.send({ type: 'subscribe' });
    await waitFor(() => c.msgs.some((m) => m.type === 'subscribed'));
    await post(`${h.url}/stop`);
    await waitFor(() => c.msgs.some((m) => m.type === 'error'));
    expect(c.msgs.find((m) => m.type === 'error').error.code).toBe('STOPPED');
  });

  it('replays a subscription that carries an older epoch from the new runtime’s first event', async () => {
    h = await startHarness();
    for (let i = 0; i < 2; i++) await post(`${h.url}/process`, { instance: mathInstance() });
    await post(`${h.url}/stop`);
    await post(`${h.url}/start`);
    await post(`${h.url}/process`, { instance: mathInstance() });
    const c = await connect(h.url);
    c.send({ type: 'subscribe', after: 6, epoch: 1 });
    await waitFor(() => c.events().length === 3);
    expect(c.msgs.find((m) => m.type === 'subscribed')).toMatchObject({ epoch: 2, after: 0 });
    expect(c.events().map((e) => e.seq)).toEqual([1, 2, 3]);
  });
});
