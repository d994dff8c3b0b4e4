import { afterEach, describe, expect, it } from 'vitest';
import { WebSocketServer, type WebSocket } from 'ws';
import { createActor, createMachine } from 'xstate';
import { afterQueuedTimers } from '../../../src/clock.js';
import { createInspector, type RuntimeInspector } from '../../../src/runtime/inspection.js';
import { createRuntime } from '../../../src/index.js';
import { createTestHandler, ManualClock, MemorySandboxProvider, ScriptedPolicy, TestCodec } from '../../../src/testing/index.js';

const toggle = createMachine({
  id: 'toggle',
  initial: 'off',
  context: { count: 0 },
  states: { off: { on: { FLIP: 'on' } }, on: { on: { FLIP: 'off' } } },
});

interface Received {
  type: string;
  [key: string]: unknown;
}

let server: WebSocketServer | null = null;
let inspector: RuntimeInspector | null = null;

async function startServer(): Promise<{ url: string; received: Received[]; waitFor: (pred: (r: Received[]) => boolean) => Promise<void> }> {
  const received: Received[] = [];
  const waiters: Array<() => void> = [];
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  server = wss;
  await new Promise<void>((resolve) => wss.once('listening', () => resolve()));
  wss.on('connection', (socket: WebSocket) => {
    socket.on('message', (data) => {
      received.push(JSON.parse(String(data)) as Received);
      for (const w of waiters.splice(0)) w();
    });
  });
  const address = wss.address();
  if (address === null || typeof address === 'string') throw new Error('unexpected pipe address');
  const waitFor = async (pred: (r: Received[]) => boolean): Promise<void> => {
    while (!pred(received)) await new Promise<void>((resolve) => waiters.push(resolve));
  };
  return { url: `ws://127.0.0.1:${address.port}`, received, waitFor };
}

afterEach(async () => {
  await inspector?.close();
  inspector = null;
  if (server !== null) {
    for (const client of server.clients) client.terminate();
    await new Promise<void>((resolve) => server!.close(() => resolve()));
    server = null;
  }
});

describe('createInspector', () => {
  it('sends @xstate.actor, @xstate.event and @xstate.snapshot frames in the @statelyai/inspect shape', async () => {
    const { url, received, waitFor } = await startServer();
    inspector = createInspector(url);
    const actor = createActor(toggle, { inspect: inspector.inspect }).start();
    actor.send({ type: 'FLIP' });
    await waitFor((r) => r.some((e) => e.type === '@xstate.snapshot' && (e.snapshot as { value?: unknown }).value === 'on'));
    actor.stop();

    const actorEvent = received.find((e) => e.type === '@xstate.actor');
    expect(actorEvent).toMatchObject({ type: '@xstate.actor', name: 'toggle', sessionId: actor.sessionId, _version: expect.any(String) });
    expect(JSON.parse(actorEvent!.definition as string)).toMatchObject({ id: 'toggle', initial: 'off' });
    const flip = received.find((e) => e.type === '@xstate.event' && (e.event as { type: string }).type === 'FLIP');
    expect(flip).toMatchObject({ sessionId: actor.sessionId, rootId: actor.sessionId, createdAt: expect.any(String) });
    const snap = received.find((e) => e.type === '@xstate.snapshot' && (e.snapshot as { value?: unknown }).value === 'on');
    expect(snap).toMatchObject({ sessionId: actor.sessionId, event: { type: 'FLIP' }, snapshot: { status: 'active', context: { count: 0 } } });
  });

  it('delivers events emitted before the connection opened once it opens', async () => {
    const { url, waitFor, received } = await startServer();
    inspector = createInspector(url);
    // The socket is still connecting: these go to the deferred buffer.
    const actor = createActor(toggle, { inspect: inspector.inspect }).start();
    actor.send({ type: 'FLIP' });
    actor.send({ type: 'FLIP' });
    await waitFor((r) => r.filter((e) => e.type === '@xstate.event' && (e.event as { type: string }).type === 'FLIP').length === 2);
    actor.stop();
    expect(received[0]?.type).toBe('@xstate.actor');
  });

  it('keeps at most maxDeferredEvents while no inspector is listening, dropping the oldest', async () => {
    // Port 9 (discard) on localhost refuses the connection, so everything is deferred.
    inspector = createInspector('ws://127.0.0.1:9', { maxDeferredEvents: 3, reconnectMs: 60_000 });
    const actor = createActor(toggle, { inspect: inspector.inspect }).start();
    for (let i = 0; i < 10; i++) actor.send({ type: 'FLIP' });
    actor.stop();
    // @statelyai/inspect converts on a setTimeout(0); let those run.
    await afterQueuedTimers();
    const stats = inspector.stats();
    expect(stats.deferred).toBe(3);
    expect(stats.dropped).toBeGreaterThan(0);
    expect(stats.sent).toBe(0);
  });

  it('stops sending and closes its socket on close()', async () => {
    const { url, received, waitFor } = await startServer();
    inspector = createInspector(url);
    const actor = createActor(toggle, { inspect: inspector.inspect }).start();
    await waitFor((r) => r.length > 0);
    await inspector.close();
    const count = received.length;
    actor.send({ type: 'FLIP' });
    actor.stop();
    // The conversions of those events run on @statelyai/inspect's setTimeout(0): after them, nothing was sent.
    await afterQueuedTimers();
    expect(received.length).toBe(count);
    await expect.poll(() => server!.clients.size).toBe(0);
  });

  it('refuses a URL that is not ws: or wss:', () => {
    expect(() => createInspector('http://127.0.0.1:1234')).toThrow(TypeError);
  });

  it("carries a runtime's rollout actors, their events and snapshots when passed as the runtime's inspect option", async () => {
    const { url, received, waitFor } = await startServer();
    inspector = createInspector(url);
    const clock = new ManualClock();
    const codec = new TestCodec();
    const rt = createRuntime({
      handlers: [createTestHandler()],
      clock,
      codec,
      llm: new ScriptedPolicy({ codec, clock }),
      sandboxes: new MemorySandboxProvider({ clock }),
      inspect: inspector.inspect,
    });
    try {
      const oracle = [{ tool_calls: [{ name: 'finish', arguments: { message: 'done' } }] }];
      const h = rt.submit({ data_source: 'scripted', instance_id: 't1', oracle });
      await clock.advance(1);
      await h.result;
      const value = (e: Received): unknown => (e.snapshot as { value?: unknown } | undefined)?.value;
      await waitFor((r) => r.some((e) => e.type === '@xstate.snapshot' && value(e) === 'done'));
      // Each rollout actor is named by its rollout.
      const actor = received.find((e) => e.type === '@xstate.actor' && e.name === `rollout ${h.id}`);
      expect(actor, 'an @xstate.actor named after the rollout').toBeDefined();
      const states = received.filter((e) => e.type === '@xstate.snapshot' && e.sessionId === actor!.sessionId).map(value);
      expect(states).toContainEqual({ running: 'llmCalling' });
      expect(states.at(-1)).toBe('done');
    } finally {
      await rt.close();
    }
  });

  it('flushes on close: a short run closed right away still delivers every frame it observed', async () => {
    const { url, received } = await startServer();
    inspector = createInspector(url);
    // An independent count of what XState handed the observer, for the frame total.
    let observed = 0;
    const insp = inspector;
    const counting = {
      next: (e: Parameters<NonNullable<typeof insp.inspect.next>>[0]): void => {
        if (e.type === '@xstate.actor' || e.type === '@xstate.event' || e.type === '@xstate.snapshot') observed++;
        insp.inspect.next?.(e);
      },
    };
    const { rt, clock } = scriptedRuntime(counting);
    const oracle = [{ tool_calls: [{ name: 'finish', arguments: { message: 'done' } }] }];
    const handles = [0, 1, 2].map((i) => rt.submit({ data_source: 'scripted', instance_id: `t${i}`, oracle }));
    await clock.advance(1);
    await Promise.all(handles.map((h) => h.result));
    // The pattern that used to send nothing: close both at once, socket possibly still connecting.
    await rt.close();
    await inspector.close();
    // The receiver has every frame once the close handshake is done (frames precede the close frame).
    await expect.poll(() => server!.clients.size).toBe(0);
    expect(observed).toBeGreaterThan(20);
    expect(received.length).toBe(observed);
    expect(inspector.stats()).toMatchObject({ sent: observed, dropped: 0, deferred: 0 });
    const done = received.filter((e) => e.type === '@xstate.snapshot' && (e.snapshot as { value?: unknown }).value === 'done');
    expect(done).toHaveLength(3);
  });

  it('names each rollout actor after its rollout', async () => {
    const { url, received } = await startServer();
    inspector = createInspector(url);
    const { rt, clock } = scriptedRuntime(inspector.inspect);
    const oracle = [{ tool_calls: [{ name: 'finish', arguments: { message: 'done' } }] }];
    const h = rt.submit({ data_source: 'scripted', instance_id: 'named', oracle });
    await clock.advance(1);
    await h.result;
    await rt.close();
    await inspector.close();
    const names = received.filter((e) => e.type === '@xstate.actor' && e.parentId === undefined).map((e) => e.name);
    expect(names).toEqual([`rollout ${h.id}`]);
  });

  it('inspects only the chosen rollouts: by id, by group, or a stable sample', async () => {
    const oracle = [{ tool_calls: [{ name: 'finish', arguments: { message: 'done' } }] }];
    const rootNames = (r: Received[]): string[] => r.filter((e) => e.type === '@xstate.actor' && e.parentId === undefined).map((e) => String(e.name)).sort();

    // By id and by group together: one lone rollout and the whole of group g1, nothing of g2.
    let srv = await startServer();
    inspector = createInspector(srv.url, { only: { rollouts: ['picked'], groups: ['g1'] } });
    let { rt, clock } = scriptedRuntime(inspector.inspect);
    const lone = rt.submit({ data_source: 'scripted', instance_id: 'a', oracle }, {}, { id: 'picked' });
    const other = rt.submit({ data_source: 'scripted', instance_id: 'b', oracle });
    const g1 = rt.submitGroup({ data_source: 'scripted', instance_id: 'c', oracle }, {}, 2, { groupId: 'g1' });
    const g2 = rt.submitGroup({ data_source: 'scripted', instance_id: 'd', oracle }, {}, 2, { groupId: 'g2' });
    await clock.advance(1);
    await Promise.all([lone.result, other.result, g1.results, g2.results]);
    const g1Ids = rt.list({ groupId: 'g1' }).map((s) => s.id);
    await rt.close();
    await inspector.close();
    expect(rootNames(srv.received)).toEqual(['picked', ...g1Ids].map((id) => `rollout ${id}`).sort());

    // sampleRate 0 inspects nothing (no frame at all); 1 inspects everything.
    for (const [rate, expected] of [[0, 0], [1, 2]] as const) {
      await inspector.close();
      srv = await startServer();
      inspector = createInspector(srv.url, { only: { sampleRate: rate } });
      ({ rt, clock } = scriptedRuntime(inspector.inspect));
      const hs = [rt.submit({ data_source: 'scripted', instance_id: 'x', oracle }), rt.submit({ data_source: 'scripted', instance_id: 'y', oracle })];
      await clock.advance(1);
      await Promise.all(hs.map((h) => h.result));
      await rt.close();
      await inspector.close();
      expect(rootNames(srv.received)).toHaveLength(expected);
    }
    // A sample is a stable function of the id: the same rollouts are chosen every time, about rate of them.
    const insp = createInspector('ws://127.0.0.1:9', { only: { sampleRate: 0.25 }, reconnectMs: 60_000, onWarning: () => {} });
    try {
      const chosen = Array.from({ length: 2000 }, (_, i) => insp.inspect.forRollout({ rolloutId: `r-${i}`, groupId: null, attempt: 1 }) !== undefined);
      const again = Array.from({ length: 2000 }, (_, i) => insp.inspect.forRollout({ rolloutId: `r-${i}`, groupId: null, attempt: 1 }) !== undefined);
      expect(again).toEqual(chosen);
      const share = chosen.filter(Boolean).length / 2000;
      expect(share).toBeGreaterThan(0.2);
      expect(share).toBeLessThan(0.3);
    } finally {
      await insp.close();
    }
    expect(() => createInspector('ws://127.0.0.1:9', { only: { sampleRate: 2 } })).toThrow(/sampleRate/);
  });

  it('warns once when the inspector cannot be reached, however often it retries', async () => {
    const warnings: string[] = [];
    // Port 9 refuses; a 5 ms backoff makes several attempts: wait for three.
    inspector = createInspector('ws://127.0.0.1:9', { reconnectMs: 5, onWarning: (m) => warnings.push(m) });
    const actor = createActor(toggle, { inspect: inspector.inspect }).start();
    actor.send({ type: 'FLIP' });
    actor.stop();
    await expect.poll(() => inspector!.stats().failedConnects).toBeGreaterThanOrEqual(3);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/inspector at ws:\/\/127\.0\.0\.1:9 cannot be reached/);
    // close() does not wait for an inspector that refused: it returns promptly and drops the frames.
    await inspector.close();
    expect(inspector.stats().sent).toBe(0);
  });
});

/** A runtime on the scripted policy and memory sandboxes, with `inspect` as its inspect option. */
function scriptedRuntime(inspect: unknown): { rt: ReturnType<typeof createRuntime>; clock: ManualClock } {
  const clock = new ManualClock();
  const codec = new TestCodec();
  const rt = createRuntime({
    handlers: [createTestHandler()],
    clock,
    codec,
    llm: new ScriptedPolicy({ codec, clock }),
    sandboxes: new MemorySandboxProvider({ clock }),
    inspect,
  });
  return { rt, clock };
}
