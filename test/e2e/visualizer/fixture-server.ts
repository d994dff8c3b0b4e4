import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocketServer, WebSocket } from 'ws';
import { createVisualizerHandler, type MachineGraph, rolloutMachineGraph } from '../../../src/server/visualizer-assets.js';
import type { RolloutEvent, RolloutEventInput, RolloutState } from '../../../src/protocol/events.js';
import type { BackendInfo } from '../../../src/llm/llm-client.js';

/** What a test can do with the fixture server. */
export interface FixtureServer {
  /** `http://127.0.0.1:<port>`. */
  url: string;
  /**
   * Stamps seq/rseq and sends to every subscriber (and retains for later subscribers); with
   * `withhold`, only retains them, as the service does for a client it finds too slow.
   */
  push(events: EventInput[], opts?: { withhold?: boolean }): void;
  backends(list: BackendInfo[], ts: number): void;
  /** Sends a message as is to every subscribed connection (heartbeats, gaps). */
  broadcast(msg: unknown): void;
  /** The `after` of every subscribe message received, in order. */
  subscribes: Array<number | undefined>;
  /** The subscriptions open now, per connection. */
  openSubs(): string[][];
  /** Drops every WebSocket connection (the page should reconnect and resume). */
  dropConnections(): void;
  /** Full results served at GET /v1/rollouts/:id. */
  results: Map<string, unknown>;
  /** Summaries served at GET /v1/rollouts (as the service's listing). */
  listing: unknown[];
  lastSeq(): number;
  /**
   * Forgets the oldest `count` retained events, as the service's retention does: a later
   * subscription from before them first gets a `gap` of reason `retention`.
   */
  forget(count: number): void;
  close(): Promise<void>;
}

/**
 * A stand-in for `rollout serve` in the browser tests: the real visualizer handler, plus a
 * WebSocket at /v1/events speaking the service's protocol (hello, subscribe with `after`,
 * `{type:'event', sub, event}`, `backends`) fed with recorded events.
 */
export async function startFixtureServer(opts: { graph?: () => Promise<MachineGraph> } = {}): Promise<FixtureServer> {
  const handler = createVisualizerHandler({ graph: opts.graph ?? rolloutMachineGraph });
  const retained: RolloutEvent[] = [];
  const rseq = new Map<string, number>();
  const results = new Map<string, unknown>();
  const listing: unknown[] = [];
  const subs = new Map<WebSocket, Set<string>>();
  const subscribes: Array<number | undefined> = [];
  let seq = 0;

  const server: Server = createServer((req, res) => {
    if (handler(req, res)) return;
    if (req.method === 'GET' && (req.url ?? '').split('?')[0] === '/v1/rollouts') {
      return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ rollouts: listing, total: listing.length }));
    }
    const m = /^\/v1\/rollouts\/([^/?]+)$/.exec(req.url ?? '');
    if (m && req.method === 'GET') {
      const body = results.get(decodeURIComponent(m[1]!));
      if (body === undefined) return void res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":{"code":"NOT_FOUND","message":"no such rollout","issues":[]}}');
      return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    }
    res.writeHead(404).end();
  });
  const wss = new WebSocketServer({ noServer: true });
  server.on('upgrade', (req, socket, head) => {
    if (req.url?.split('?')[0] !== '/v1/events') return void socket.destroy();
    wss.handleUpgrade(req, socket, head, (ws) => {
      ws.send(JSON.stringify({ type: 'hello', epoch: 1, seq, heartbeat_ms: 15000 }));
      ws.on('message', (data) => {
        const msg = JSON.parse(String(data)) as { type: string; sub?: string; after?: number };
        const names = subs.get(ws) ?? new Set<string>();
        subs.set(ws, names);
        const sub = msg.sub ?? 'default';
        if (msg.type === 'unsubscribe') {
          names.delete(sub);
          return void ws.send(JSON.stringify({ type: 'unsubscribed', sub }));
        }
        if (msg.type !== 'subscribe') return;
        subscribes.push(msg.after);
        names.add(sub);
        ws.send(JSON.stringify({ type: 'subscribed', sub, rollout: null, group: null, after: msg.after ?? null }));
        const after = msg.after ?? seq;
        // As the event hub: a subscriber asking for events past the retention learns it first.
        const oldest = retained[0]?.seq ?? seq + 1;
        if (after + 1 < oldest && after < seq) ws.send(JSON.stringify({ type: 'gap', sub, from: after + 1, to: Math.min(oldest - 1, seq), reason: 'retention' }));
        for (const ev of retained) if (ev.seq > after) ws.send(JSON.stringify({ type: 'event', sub, event: ev }));
      });
      ws.on('close', () => subs.delete(ws));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    subscribes,
    results,
    listing,
    lastSeq: () => seq,
    forget: (count) => void retained.splice(0, count),
    openSubs: () => [...subs.values()].map((names) => [...names]),
    push(events, pushOpts = {}) {
      for (const e of events) {
        const r = (rseq.get(e.rolloutId) ?? 0) + 1;
        rseq.set(e.rolloutId, r);
        const ev = { ...e, seq: ++seq, rseq: r } as RolloutEvent;
        retained.push(ev);
        if (pushOpts.withhold) continue;
        for (const [ws, names] of subs) {
          if (ws.readyState !== WebSocket.OPEN) continue;
          for (const sub of names) ws.send(JSON.stringify({ type: 'event', sub, event: ev }));
        }
      }
    },
    backends(list, ts) {
      for (const ws of subs.keys()) if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: 'backends', ts, backends: list }));
    },
    broadcast(msg) {
      for (const ws of subs.keys()) if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(msg));
    },
    dropConnections() {
      for (const ws of wss.clients) ws.terminate();
    },
    async close() {
      for (const ws of wss.clients) ws.terminate();
      wss.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** An event as recorded: everything but the seq numbers, which the server stamps. */
export type EventInput = RolloutEventInput & { ts: number };

/**
 * A recorded-looking rollout: submitted, init, `turns` LLM turns each running one bash command,
 * evaluation and a result. Timestamps advance from `t0` in fixed steps (no wall clock).
 */
export function syntheticRollout(
  id: string,
  t0: number,
  opts: { turns?: number; finish?: boolean; task?: string; reward?: number; groupId?: string; trajectoryId?: string } = {},
): EventInput[] {
  const turns = opts.turns ?? 2;
  let t = t0;
  const at = (dt: number): number => (t += dt);
  const ev: EventInput[] = [];
  const state = (s: RolloutState, prev: RolloutState | null, turn: number): void => {
    ev.push({ type: 'rollout.state', rolloutId: id, ts: at(5), state: s, prev, turn });
  };
  ev.push({ type: 'rollout.submitted', rolloutId: id, ts: t, instanceId: `inst-${id}`, trajectoryId: opts.trajectoryId ?? '0', groupId: opts.groupId ?? null, dataSource: opts.task ?? 'swe-lite', attempt: 1 });
  state('queued', null, 0);
  state('initializing', 'queued', 0);
  state('waitingRun', 'initializing', 0);
  let prev: RolloutState = 'waitingRun';
  for (let turn = 0; turn < turns; turn++) {
    state('llmCalling', prev, turn);
    ev.push({ type: 'llm.start', rolloutId: id, ts: at(1), turn, promptTokens: 100 + turn * 50, maxTokens: 512 });
    const command = `echo step-${turn}-of-${id}`;
    ev.push({
      type: 'llm.end', rolloutId: id, ts: at(40), turn, backendId: 'b0', promptTokens: 100 + turn * 50, outputTokens: 20, latencyMs: 40,
      finishReason: 'stop', content: `Let me run ${command}`, toolCalls: [{ id: `c${turn}`, name: 'execute_bash', arguments: { command } }],
    });
    state('acting', 'llmCalling', turn + 1);
    ev.push({ type: 'tool.call', rolloutId: id, ts: at(1), turn, callId: `c${turn}`, name: 'execute_bash', arguments: { command } });
    ev.push({ type: 'tool.result', rolloutId: id, ts: at(3), turn, callId: `c${turn}`, name: 'execute_bash', output: `step-${turn}-of-${id}\n`, exitCode: 0, latencyMs: 3, error: false });
    prev = 'acting';
  }
  if (opts.finish === false) return ev;
  state('waitingEval', prev, turns);
  state('evaluating', 'waitingEval', turns);
  state('done', 'evaluating', turns);
  ev.push({
    type: 'rollout.result', rolloutId: id, ts: at(1), outcome: 'completed', finish: 'finish_tool', reward: opts.reward ?? 1, resolved: (opts.reward ?? 1) > 0, error: null,
    timing: { queueMs: 5, initMs: 5, runMs: 100, evalMs: 5, countedMs: 110, wallMs: 115, timeoutTriggered: false },
    tokens: 100 + turns * 70, turns,
  });
  return ev;
}
