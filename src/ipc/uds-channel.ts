import net from 'node:net';
import { once } from 'node:events';
import { systemClock, unref, type Clock, type TimerHandle } from '../clock.js';
import { CancelledError, InfraError, ProtocolError, deserializeError, serializeError, toRolloutError } from '../errors.js';
import { IpcErrorReplySchema } from '../protocol/ipc.js';
import { DEFAULT_MAX_FRAME_BYTES, FrameDecoder, encodeFrame } from './frame-codec.js';

/** A message on the wire: a plain map with a `type`, and an `id` when it is a request or a reply. */
export type WireMessage = { type: string; id?: number } & Record<string, unknown>;

/** Options of a {@link UdsChannel}. */
export interface ChannelOptions {
  /** Largest frame body accepted or sent. Default 64 MiB. */
  maxFrameBytes?: number;
  /** Default per-request timeout in ms; a request may override it. Default 60 s. */
  requestTimeoutMs?: number;
  /**
   * Answers a request of the peer. Its return value (without `type`/`id`) becomes the
   * `<type>.result` reply; a throw becomes an `error` reply carrying `serializeError()`.
   */
  onRequest?: (msg: WireMessage & { id: number }) => Promise<Record<string, unknown>> | Record<string, unknown>;
  /** The clock of request timeouts and the close grace. Default the system clock. */
  clock?: Clock;
  /** Receives messages without an `id`. Must not throw. */
  onNotification?: (msg: WireMessage) => void;
  /** Called once when the channel closes; `err` is null on a clean close. */
  onClose?: (err: Error | null) => void;
}

interface Pending {
  resolve: (msg: WireMessage) => void;
  reject: (err: Error) => void;
  timer: TimerHandle | undefined;
  cleanup: () => void;
}

/**
 * A request/reply channel over one Unix-domain (or any stream) socket: 4-byte big-endian
 * length + one msgpack map per frame (see docs/sandboxes.md, "Wire protocol").
 *
 * Guarantees:
 * - every request settles exactly once: with its reply, its error (rebuilt with
 *   `deserializeError`, so the class survives), a timeout (`InfraError` code `IPC_TIMEOUT`),
 *   an abort (`CancelledError`) or the channel's close;
 * - an oversize or undecodable frame closes the connection and rejects every pending request
 *   with that `ProtocolError`; it never throws out of an event handler;
 * - writes respect backpressure: when the socket's buffer is full, later frames wait for
 *   `drain` in order;
 * - a late reply to a request that timed out or was aborted is dropped.
 */
export class UdsChannel {
  private readonly decoder: FrameDecoder;
  private readonly pending = new Map<number, Pending>();
  private readonly maxFrameBytes: number;
  private readonly requestTimeoutMs: number;
  private readonly clock: Clock;
  private nextId = 1;
  private closeError: Error | null = null;
  private isClosed = false;
  private writeChain: Promise<void> = Promise.resolve();
  /** Resolves when the channel has closed, with the reason (null when clean). */
  readonly closed: Promise<Error | null>;
  private resolveClosed!: (err: Error | null) => void;

  constructor(
    private readonly socket: net.Socket,
    private readonly opts: ChannelOptions = {},
  ) {
    this.maxFrameBytes = opts.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
    this.requestTimeoutMs = opts.requestTimeoutMs ?? 60_000;
    this.clock = opts.clock ?? systemClock;
    this.decoder = new FrameDecoder(this.maxFrameBytes);
    this.closed = new Promise((r) => (this.resolveClosed = r));
    socket.setNoDelay?.(true);
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('error', (err) => this.shutdown(new InfraError(`channel socket error: ${err.message}`, { code: 'CHANNEL_CLOSED', cause: err })));
    socket.on('close', () => this.shutdown(null));
  }

  /**
   * Connects to a Unix socket path.
   * @throws InfraError (`CHANNEL_CONNECT`) when nothing listens there.
   */
  static async connect(path: string, opts: ChannelOptions = {}): Promise<UdsChannel> {
    const socket = net.connect(path);
    try {
      await once(socket, 'connect');
    } catch (cause) {
      socket.destroy();
      throw new InfraError(`cannot connect to ${path}: ${(cause as Error).message}`, { code: 'CHANNEL_CONNECT', cause });
    }
    return new UdsChannel(socket, opts);
  }

  /** True once the channel has closed; requests then reject at once. */
  get isOpen(): boolean {
    return !this.isClosed;
  }

  /** Requests in flight. */
  get pendingCount(): number {
    return this.pending.size;
  }

  /**
   * Sends a request and resolves with its `<type>.result` reply.
   * @throws the peer's error (deserialized), InfraError `IPC_TIMEOUT` / `CHANNEL_CLOSED`,
   *   CancelledError on abort, ProtocolError when the request is too large to send.
   */
  request(msg: { type: string } & Record<string, unknown>, opts: { timeoutMs?: number | undefined; signal?: AbortSignal | undefined } = {}): Promise<WireMessage> {
    if (this.isClosed) return Promise.reject(this.closedError());
    if (opts.signal?.aborted) return Promise.reject(new CancelledError(`request ${msg.type} aborted`));
    const id = this.nextId++;
    let frame: Buffer;
    try {
      // Copy then set, not `{ ...msg, id }`: Node 20's V8 builds an object spread followed by
      // more keys on a slow path, ~7 µs a time, on the action's critical path (bench/sandbox.ts,
      // `action_over_raw_pty`); a copy plus a set is ~0.2 µs.
      const out: Record<string, unknown> = Object.assign({}, msg);
      out.id = id;
      frame = encodeFrame(out, this.maxFrameBytes);
    } catch (err) {
      return Promise.reject(err);
    }
    return new Promise<WireMessage>((resolve, reject) => {
      const timeoutMs = opts.timeoutMs ?? this.requestTimeoutMs;
      const signal = opts.signal;
      const onAbort = (): void => settle(new CancelledError(`request ${msg.type} aborted`));
      const p: Pending = {
        resolve: (reply) => {
          p.cleanup();
          resolve(reply);
        },
        reject: (err) => {
          p.cleanup();
          reject(err);
        },
        timer: undefined,
        cleanup: () => {
          if (p.timer !== undefined) this.clock.clearTimeout(p.timer);
          signal?.removeEventListener('abort', onAbort);
          this.pending.delete(id);
        },
      };
      const settle = (err: Error): void => {
        if (this.pending.get(id) === p) p.reject(err);
      };
      this.pending.set(id, p);
      // The frame goes out first: the timer and the abort listener are armed while the peer
      // works. No reply can be handled before this function returns (same tick).
      this.write(frame);
      p.timer = this.clock.setTimeout(() => settle(new InfraError(`request ${msg.type} timed out after ${timeoutMs} ms`, { code: 'IPC_TIMEOUT' })), timeoutMs);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /**
   * Sends a message that gets no reply.
   * @throws ProtocolError when it is too large; InfraError when the channel is closed.
   */
  notify(msg: { type: string } & Record<string, unknown>): void {
    if (this.isClosed) throw this.closedError();
    this.write(encodeFrame(msg, this.maxFrameBytes));
  }

  /** Closes the connection; pending requests reject with `CHANNEL_CLOSED`. Idempotent. */
  async close(): Promise<void> {
    if (!this.isClosed) {
      this.socket.end();
      // A peer that never half-closes must not keep us waiting.
      unref(this.clock.setTimeout(() => this.socket.destroy(), 1000));
      this.shutdown(null);
    }
    await this.closed;
  }

  private write(frame: Buffer): void {
    // Frames are chained so that, once one had to wait for 'drain', later ones queue behind it
    // in order instead of growing the socket's buffer without bound.
    if (!this.socket.writableNeedDrain && this.writeChainIdle) {
      this.socket.write(frame);
      return;
    }
    this.writeChainIdle = false;
    this.writeChain = this.writeChain.then(async () => {
      if (this.isClosed) return;
      if (this.socket.writableNeedDrain) await Promise.race([once(this.socket, 'drain'), this.closed]);
      if (!this.isClosed) this.socket.write(frame);
    });
    const mine = this.writeChain;
    // Never rejects: each link of the write chain races the socket's `closed`.
    void mine.then(() => {
      if (this.writeChain === mine) this.writeChainIdle = true;
    });
  }
  private writeChainIdle = true;

  private onData(chunk: Buffer): void {
    let messages: Record<string, unknown>[];
    try {
      messages = this.decoder.push(chunk);
    } catch (err) {
      this.socket.destroy();
      this.shutdown(err as Error);
      return;
    }
    for (const m of messages) this.dispatch(m);
  }

  private dispatch(raw: Record<string, unknown>): void {
    const type = raw.type;
    const id = raw.id;
    if (typeof type !== 'string' || type.length === 0 || (id !== undefined && (typeof id !== 'number' || !Number.isInteger(id) || id < 0))) {
      this.socket.destroy();
      this.shutdown(new ProtocolError('a message needs a string `type` and, if any, a non-negative integer `id`', { code: 'BAD_ENVELOPE' }));
      return;
    }
    const msg = raw as WireMessage;
    if (id === undefined) {
      this.opts.onNotification?.(msg);
      return;
    }
    if (type === 'error' || type.endsWith('.result')) {
      const p = this.pending.get(id);
      if (!p) return; // timed out or aborted earlier
      if (type === 'error') {
        const parsed = IpcErrorReplySchema.safeParse(msg);
        p.reject(parsed.success ? deserializeError(parsed.data.error) : new ProtocolError('malformed error reply', { code: 'BAD_ERROR_REPLY' }));
      } else p.resolve(msg);
      return;
    }
    // Never rejects: answer() turns a handler's failure into an error reply.
    void this.answer(msg as WireMessage & { id: number });
  }

  private async answer(msg: WireMessage & { id: number }): Promise<void> {
    let reply: Record<string, unknown>;
    try {
      if (!this.opts.onRequest) throw new ProtocolError(`no handler for requests (${msg.type})`, { code: 'NO_HANDLER' });
      const body = await this.opts.onRequest(msg);
      // Copy then set (not a spread with extra keys, V8's slow path: ~9 µs per reply; see request()).
      reply = Object.assign({}, body);
      reply.type = `${msg.type}.result`;
      reply.id = msg.id;
    } catch (err) {
      reply = { type: 'error', id: msg.id, error: serializeError(err) };
    }
    if (this.isClosed) return;
    let frame: Buffer;
    try {
      frame = encodeFrame(reply, this.maxFrameBytes);
    } catch (err) {
      frame = encodeFrame({ type: 'error', id: msg.id, error: serializeError(err) }, this.maxFrameBytes);
    }
    this.write(frame);
  }

  private closedError(): Error {
    return this.closeError ?? new InfraError('channel is closed', { code: 'CHANNEL_CLOSED' });
  }

  private shutdown(err: Error | null): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.closeError = err ? toRolloutError(err) : null;
    const reason = this.closedError();
    for (const p of [...this.pending.values()]) p.reject(reason);
    this.resolveClosed(err);
    this.opts.onClose?.(err);
  }
}
