import type { IncomingMessage } from 'node:http';
import { every, systemClock, unref, type Clock } from '../clock.js';
import type { Duplex } from 'node:stream';
import { WebSocketServer, WebSocket, type RawData } from 'ws';
import { WsClientMessageSchema, type WsServerMessage } from '../protocol/http.js';
import type { RolloutEvent } from '../protocol/events.js';
import { isAuthorized, isHostAllowed, isOriginAllowed } from './auth.js';
import { zodIssues } from './http-error.js';
import type { ServiceContext } from './service-context.js';
import { bufferItems, settleBufferLeases } from './buffer-routes.js';

/** The path of the event stream. */
export const EVENTS_PATH = '/v1/events';

type StreamItem = RolloutEvent | { type: 'gap'; from: number; to: number };

interface Subscription {
  id: string;
  abort: AbortController;
  /** Events dropped because the socket was over its soft limit, not yet reported. */
  gapFrom: number | null;
  gapTo: number;
  /** A buffer subscription's buffer and the leases of its groups not yet acked (released when it ends). */
  buffer?: { id: string; leases: Set<string> };
}

interface Connection {
  ws: WebSocket;
  subs: Map<string, Subscription>;
  alive: boolean;
  /** When the socket went over the soft limit (null while under it). */
  slowSince: number | null;
  /** Message-rate token bucket: tokens left, and when it was last refilled. */
  tokens: number;
  refilledAt: number;
  /** Messages received and not yet handled (bounded by the bucket's burst). */
  inbox: { data: RawData; isBinary: boolean }[];
  /** A drain of the inbox is scheduled. */
  draining: boolean;
}

/** Client messages handled per turn of the event loop; the rest wait for the next turn. */
const MESSAGES_PER_TURN = 16;

/**
 * The WebSocket hub at `/v1/events`.
 *
 * Each subscription is one runtime `events()` iterator (with its own bounded buffer inside the
 * runtime), so a subscriber never holds up a rollout: the runtime drops a lagging subscriber's
 * oldest events and reports a gap. On top of that the hub watches each socket's `bufferedAmount`:
 * above `wsSoftLimitBytes` it stops writing, counts what it skipped, and reports it as one
 * `{type:'gap', reason:'slow-client'}` once the socket drains; a socket above the limit for
 * `wsSlowCloseMs` is closed with 1008 "slow consumer". Memory per client is therefore bounded by
 * the soft limit plus one message.
 *
 * Heartbeats: a WebSocket ping every `heartbeatMs` (a peer that missed the previous pong is
 * terminated) and an app-level `{type:'heartbeat', ts, seq}` carrying the latest seq. Backend load
 * snapshots go out every `backendsIntervalMs` as `{type:'backends'}`.
 */
export class WsEventHub {
  private readonly wss: WebSocketServer;
  private readonly conns = new Set<Connection>();
  /** Stop functions of the heartbeat and backend-snapshot periods (on the clock, so tests drive them). */
  private readonly stopHeartbeat: () => void;
  private readonly stopBackends: (() => void) | null;
  /** Serialized events, shared by every subscriber (an event is stringified once, not once per socket). */
  private readonly cache = new WeakMap<object, string>();

  /** `clock` times heartbeats' timestamps and the slow-client limit (the process's one clock). */
  constructor(
    private readonly service: ServiceContext,
    private readonly clock: Clock = systemClock,
  ) {
    const o = service.options;
    this.wss = new WebSocketServer({ noServer: true, maxPayload: o.wsMaxPayloadBytes, perMessageDeflate: false });
    this.stopHeartbeat = every(clock, o.heartbeatMs, () => this.tick());
    this.stopBackends = o.backendsIntervalMs > 0 ? every(clock, o.backendsIntervalMs, () => this.pushBackends()) : null;
  }

  /** Open connections (for tests and metrics). */
  get size(): number {
    return this.conns.size;
  }

  /** The server's `upgrade` listener: authenticates, then hands the socket to `ws`. */
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'http://localhost');
    } catch {
      return refuse(socket, 400, 'Bad Request');
    }
    if (url.pathname !== EVENTS_PATH) return refuse(socket, 404, 'Not Found');
    if (!isHostAllowed(req, this.service.options.host, this.service.options.token)) return refuse(socket, 403, 'Forbidden');
    if (!isAuthorized(req, this.service.options.token, url)) return refuse(socket, 401, 'Unauthorized');
    // Browsers let any page open a WebSocket to 127.0.0.1: only pages served by this service (the
    // visualizer) or holding the token may. Non-browser clients send no Origin.
    if (!isOriginAllowed(req, this.service.options.token, url)) return refuse(socket, 403, 'Forbidden');
    if (this.conns.size >= this.service.options.wsMaxConnections) return refuse(socket, 503, 'Service Unavailable');
    this.wss.handleUpgrade(req, socket, head, (ws) => this.accept(ws));
  }

  /** A new runtime is running: connections stay, and get a fresh hello with the new epoch. */
  onRuntimeStarted(): void {
    for (const c of this.conns) this.sendHello(c);
  }

  /** The runtime is going away: every subscription ends (clients resubscribe after `/start`). */
  onRuntimeStopped(): void {
    for (const c of this.conns) {
      for (const s of c.subs.values()) s.abort.abort();
      c.subs.clear();
      send(c.ws, { type: 'error', error: { code: 'STOPPED', message: 'the runtime stopped; subscriptions ended', issues: [] } });
    }
  }

  /** Closes every connection and stops the timers. */
  close(): void {
    this.stopHeartbeat();
    this.stopBackends?.();
    for (const c of this.conns) {
      for (const s of c.subs.values()) s.abort.abort();
      c.ws.close(1001, 'server closing');
      unref(this.clock.setTimeout(() => c.ws.terminate(), 1000));
    }
    this.wss.close();
  }

  private accept(ws: WebSocket): void {
    const conn: Connection = { ws, subs: new Map(), alive: true, slowSince: null, tokens: this.service.options.wsMessageBurst, refilledAt: this.clock.now(), inbox: [], draining: false };
    this.conns.add(conn);
    this.service.metrics.wsConnections.set(this.conns.size);
    ws.on('pong', () => {
      conn.alive = true;
    });
    ws.on('message', (data, isBinary) => this.receive(conn, data, isBinary));
    ws.on('error', () => ws.terminate());
    ws.on('close', () => {
      for (const s of conn.subs.values()) s.abort.abort();
      conn.subs.clear();
      this.conns.delete(conn);
      this.service.metrics.wsConnections.set(this.conns.size);
    });
    this.sendHello(conn);
  }

  private sendHello(c: Connection): void {
    send(c.ws, { type: 'hello', epoch: this.service.epoch, seq: this.service.lastSeq, heartbeat_ms: this.service.options.heartbeatMs });
  }

  /**
   * Admits one client message (#9.13): a token bucket bounds each connection's rate
   * (`wsMessagesPerSecond`, bursts of `wsMessageBurst`) and a client over it is closed with 1008;
   * admitted messages are queued and handled a few per event-loop turn (setImmediate), so a
   * flooding client cannot hold the loop and `/healthz` and the HTTP routes keep answering.
   */
  private receive(conn: Connection, data: RawData, isBinary: boolean): void {
    if (conn.ws.readyState !== WebSocket.OPEN) return;
    const o = this.service.options;
    const now = this.clock.now();
    conn.tokens = Math.min(o.wsMessageBurst, conn.tokens + ((now - conn.refilledAt) / 1000) * o.wsMessagesPerSecond);
    conn.refilledAt = now;
    if (conn.tokens < 1) {
      this.service.metrics.wsDropped.inc({ reason: 'rate' });
      conn.inbox.length = 0;
      conn.ws.close(1008, 'message rate exceeded');
      unref(this.clock.setTimeout(() => conn.ws.terminate(), 1000));
      return;
    }
    conn.tokens -= 1;
    conn.inbox.push({ data, isBinary });
    if (!conn.draining) {
      conn.draining = true;
      setImmediate(() => this.drainInbox(conn));
    }
  }

  private drainInbox(conn: Connection): void {
    for (let i = 0; i < MESSAGES_PER_TURN && conn.inbox.length > 0; i++) {
      const m = conn.inbox.shift()!;
      if (conn.ws.readyState !== WebSocket.OPEN) break;
      this.onMessage(conn, m.data, m.isBinary);
    }
    if (conn.inbox.length > 0 && conn.ws.readyState === WebSocket.OPEN) setImmediate(() => this.drainInbox(conn));
    else {
      conn.inbox.length = 0;
      conn.draining = false;
    }
  }

  private onMessage(conn: Connection, data: RawData, isBinary: boolean): void {
    const fail = (message: string, issues: { path: string; message: string }[] = []): void =>
      send(conn.ws, { type: 'error', error: { code: 'BAD_MESSAGE', message, issues } });
    if (isBinary) return fail('binary messages are not accepted');
    let json: unknown;
    try {
      json = JSON.parse(data.toString());
    } catch {
      return fail('malformed JSON');
    }
    const r = WsClientMessageSchema.safeParse(json);
    if (!r.success) return fail('invalid message', zodIssues(r.error));
    const msg = r.data;
    if (msg.type === 'ping') return send(conn.ws, { type: 'pong', nonce: msg.nonce ?? null });
    if (msg.type === 'ack') {
      const b = conn.subs.get(msg.sub)?.buffer;
      if (!b) return fail(`no buffer subscription '${msg.sub}' on this connection`, [{ path: 'sub', message: 'not a buffer subscription of this connection' }]);
      // A subscription acks its own leases only; the others' ids are unknown to it.
      const mine = msg.leases.filter((l) => b.leases.has(l));
      const r = settleBufferLeases(this.service, b.id, mine, 'ack') ?? { done: [], unknown: mine };
      const acked = new Set(r.done);
      for (const l of acked) b.leases.delete(l);
      return send(conn.ws, { type: 'acked', sub: msg.sub, acked: r.done, unknown: msg.leases.filter((l) => !acked.has(l)) });
    }
    if (msg.type === 'unsubscribe') {
      conn.subs.get(msg.sub)?.abort.abort();
      conn.subs.delete(msg.sub);
      return send(conn.ws, { type: 'unsubscribed', sub: msg.sub });
    }
    const rt = this.service.runtime;
    if (!rt) return send(conn.ws, { type: 'error', error: { code: 'STOPPED', message: 'the service is stopped; POST /start first', issues: [] } });
    if (conn.subs.has(msg.sub)) return fail(`subscription '${msg.sub}' exists; unsubscribe first`, [{ path: 'sub', message: 'already in use' }]);
    if (conn.subs.size >= this.service.options.wsMaxSubscriptions) return fail('too many subscriptions on this connection');
    const sub: Subscription = { id: msg.sub, abort: new AbortController(), gapFrom: null, gapTo: 0 };
    conn.subs.set(sub.id, sub);
    // A cursor from an earlier runtime (before a /stop + /start) means nothing to this one: its
    // seqs start over, so replay what it retained from its start.
    const after = msg.after !== undefined && msg.epoch !== undefined && msg.epoch !== this.service.epoch ? 0 : msg.after;
    if (msg.ack !== undefined && msg.buffer === undefined) {
      conn.subs.delete(sub.id);
      return fail('ack is for buffer subscriptions', [{ path: 'ack', message: 'only with buffer' }]);
    }
    if (msg.buffer !== undefined) {
      const leases = new Set<string>();
      const manual = msg.ack === 'manual';
      const items = bufferItems(this.service, msg.buffer, sub.abort.signal, leases, manual);
      if (!items) {
        conn.subs.delete(sub.id);
        return fail(`no buffer ${msg.buffer}`, [{ path: 'buffer', message: 'unknown buffer' }]);
      }
      sub.buffer = { id: msg.buffer, leases };
      send(conn.ws, { type: 'subscribed', sub: sub.id, epoch: this.service.epoch, rollout: null, group: null, after: null });
      // Its items end by throwing when the runtime closes or the subscription is aborted: the
      // connection itself stays, and unsent leases go back in line with the subscription.
      void this.pumpBuffer(conn, sub, items, manual).catch(() => undefined);
      return;
    }
    send(conn.ws, { type: 'subscribed', sub: sub.id, epoch: this.service.epoch, rollout: msg.rollout ?? null, group: msg.group ?? null, after: after ?? null });
    const iter = rt.events({
      rolloutId: msg.rollout,
      groupId: msg.group,
      after,
      bufferSize: this.service.options.wsSubscriptionBuffer,
      signal: sub.abort.signal,
    });
    // Never rejects: pump catches its stream's end itself.
    void this.pump(conn, sub, iter);
  }

  /**
   * A buffer subscription's groups, each on a lease until it is safe to let go: with `manual`
   * acks the group goes out with its `lease_id` (bufferItems puts it in) and stays leased until
   * the client acks it;
   * otherwise the hub acks it itself once the socket has taken the frame, and gives it back when
   * the write fails. Leases still held when the subscription ends (unsubscribe, socket closed)
   * go back in line (bufferItems), so a group is never lost between the buffer and the client.
   */
  private async pumpBuffer(conn: Connection, sub: Subscription, items: AsyncIterable<{ item: Record<string, unknown>; leaseId: string | null }>, manual: boolean): Promise<void> {
    const { id, leases } = sub.buffer!;
    for await (const { item, leaseId } of items) {
      if (sub.abort.signal.aborted || conn.ws.readyState !== WebSocket.OPEN) break;
      const text = JSON.stringify({ type: 'buffer', sub: sub.id, item });
      if (leaseId === null || manual) {
        sendRaw(conn.ws, text);
        continue;
      }
      sendRaw(conn.ws, text, (err) => {
        // A failed write means a dead socket: the subscription ends, its groups go back in line.
        if (err) sub.abort.abort();
        if (!leases.delete(leaseId)) return; // released meanwhile with the subscription
        settleBufferLeases(this.service, id, [leaseId], err ? 'release' : 'ack');
      });
    }
  }

  private async pump(conn: Connection, sub: Subscription, iter: AsyncIterable<StreamItem>): Promise<void> {
    try {
      for await (const item of iter) {
        if (sub.abort.signal.aborted || conn.ws.readyState !== WebSocket.OPEN) break;
        this.deliver(conn, sub, item);
      }
    } catch {
      // The runtime closed or the subscription was aborted: the connection itself stays.
    }
  }

  private deliver(conn: Connection, sub: Subscription, item: StreamItem): void {
    const ws = conn.ws;
    if (item.type === 'gap') {
      this.flushGap(conn, sub);
      return sendRaw(ws, JSON.stringify({ type: 'gap', sub: sub.id, from: item.from, to: item.to, reason: 'retention' }));
    }
    if (ws.bufferedAmount > this.service.options.wsSoftLimitBytes) {
      if (sub.gapFrom === null) sub.gapFrom = item.seq;
      sub.gapTo = item.seq;
      conn.slowSince ??= this.clock.now();
      this.service.metrics.wsDropped.inc({ reason: 'slow-client' });
      return;
    }
    conn.slowSince = null;
    this.flushGap(conn, sub);
    let text = this.cache.get(item);
    if (text === undefined) {
      text = JSON.stringify(item);
      this.cache.set(item, text);
    }
    sendRaw(ws, `{"type":"event","sub":${JSON.stringify(sub.id)},"event":${text}}`);
  }

  private flushGap(conn: Connection, sub: Subscription): void {
    if (sub.gapFrom === null) return;
    sendRaw(conn.ws, JSON.stringify({ type: 'gap', sub: sub.id, from: sub.gapFrom, to: sub.gapTo, reason: 'slow-client' }));
    sub.gapFrom = null;
  }

  private tick(): void {
    const now = this.clock.now();
    const o = this.service.options;
    const hb = JSON.stringify({ type: 'heartbeat', ts: now, seq: this.service.lastSeq });
    for (const c of this.conns) {
      if (!c.alive) {
        c.ws.terminate();
        continue;
      }
      c.alive = false;
      c.ws.ping();
      if (c.ws.bufferedAmount > o.wsSoftLimitBytes) {
        c.slowSince ??= now;
        if (now - c.slowSince >= o.wsSlowCloseMs) {
          this.service.metrics.wsDropped.inc({ reason: 'closed' });
          c.ws.close(1008, 'slow consumer');
          unref(this.clock.setTimeout(() => c.ws.terminate(), 1000));
        }
        continue;
      }
      c.slowSince = null;
      for (const s of c.subs.values()) this.flushGap(c, s);
      sendRaw(c.ws, hb);
    }
  }

  private pushBackends(): void {
    const rt = this.service.runtime;
    if (this.conns.size === 0 || !rt?.listBackends) return;
    const text = JSON.stringify({ type: 'backends', ts: this.clock.now(), backends: rt.listBackends() });
    for (const c of this.conns) if (c.ws.bufferedAmount <= this.service.options.wsSoftLimitBytes) sendRaw(c.ws, text);
  }
}

function send(ws: WebSocket, msg: WsServerMessage): void {
  sendRaw(ws, JSON.stringify(msg));
}

/** Bytes written to each corked socket since it was last flushed. */
const corked = new WeakMap<object, { bytes: number }>();
/** A corked socket is flushed once it holds this much, so `bufferedAmount` stays meaningful. */
const CORK_FLUSH_BYTES = 64 * 1024;

/**
 * Sends one text frame. Frames sent in the same tick share writes: the socket is corked on the
 * first and uncorked on the next tick, or as soon as 64 KiB are waiting. Measured
 * (bench/service.ts): one write per event per subscriber was the fan-out's bottleneck.
 */
function sendRaw(ws: WebSocket, text: string, written?: (err?: Error) => void): void {
  if (ws.readyState !== WebSocket.OPEN) {
    written?.(new Error('the socket is not open'));
    return;
  }
  const socket = (ws as unknown as { _socket?: { cork(): void; uncork(): void } })._socket;
  if (socket) {
    let c = corked.get(socket);
    if (!c) {
      c = { bytes: 0 };
      corked.set(socket, c);
      socket.cork();
      process.nextTick(() => {
        corked.delete(socket);
        socket.uncork();
      });
    } else if (c.bytes > CORK_FLUSH_BYTES) {
      socket.uncork();
      socket.cork();
      c.bytes = 0;
    }
    c.bytes += text.length;
  }
  ws.send(text, written);
}

function refuse(socket: Duplex, status: number, text: string): void {
  const body = JSON.stringify({ error: { code: text.toUpperCase().replace(/ /g, '_'), message: text, issues: [] } });
  socket.end(`HTTP/1.1 ${status} ${text}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
}
