import type { ChildProcess } from 'node:child_process';
import net from 'node:net';
import { LlmListenerOfferSchema, LlmListenerReplySchema, type LlmListenerOffer, type LlmListenerReply } from '../protocol/sandbox.js';

/**
 * Handing a sandbox's LLM proxy listener to the process that serves the proxy, so a harness's
 * connection reaches the proxy with no process in between.
 *
 * The listener (127.0.0.1:18400 in the sandbox's network namespace) is made by the sandbox host
 * (llm-proxy-forwarder.ts), which by itself pipes every connection to the proxy's Unix socket:
 * two more socket hops and a wake-up of a third process per request and per answer — measured
 * (bench/proxy-hops.ts) as the largest single part of the proxy's overhead besides its own
 * work. When the host was started by a runtime with an IPC channel (sandbox-provider.ts), it
 * also offers the listening socket to that runtime ({@link offerLlmListener}); a proxy of that
 * process that listens on the same socket path takes it ({@link acceptLlmListeners}) and serves
 * its connections itself; the host then stops accepting on it. Otherwise (no such proxy, an old
 * runtime, a host started by hand) the host keeps forwarding. Both paths answer the same: the
 * proxy's HTTP server and its token gate see the same bytes.
 */

/** What takes a listener: the proxy's own server, for one socket path. */
export type LlmListenerSink = (listener: net.Server) => void;

const sinks = new Map<string, LlmListenerSink>();

/**
 * Registers `sink` for listeners offered for `socketPath` (by sandboxes this process's provider
 * started). Returns the unregistration (idempotent; a newer sink for the path stays).
 */
export function acceptLlmListeners(socketPath: string, sink: LlmListenerSink): () => void {
  sinks.set(socketPath, sink);
  return () => {
    if (sinks.get(socketPath) === sink) sinks.delete(socketPath);
  };
}

/** Runtime side: answers a host's offers on its IPC channel (listeners nobody takes are closed here; the host keeps its copy). */
export function serveLlmListenerOffers(proc: ChildProcess): void {
  proc.on('message', (msg: unknown, handle: unknown) => {
    const offer = LlmListenerOfferSchema.safeParse(msg);
    if (!offer.success) return;
    const sink = sinks.get(offer.data.socketPath);
    const adopted = sink !== undefined && handle instanceof net.Server;
    if (adopted) sink(handle);
    else if (handle instanceof net.Server) handle.close();
    const reply: LlmListenerReply = { type: 'llm-proxy.listener.reply', seq: offer.data.seq, adopted };
    if (proc.connected) proc.send(reply, (err: Error | null) => void err);
  });
  // The channel alone must not keep the runtime alive (the hosts' lifetimes are the provider's).
  proc.channel?.unref();
}

let seq = 0;

/**
 * Host side: offers `listener` (for the proxy at `socketPath`) to the runtime that started this
 * process. Resolves true once the runtime serves it (the caller then stops accepting on its own
 * copy), false when there is no IPC channel, nobody took it, or no answer came in `timeoutMs`.
 */
export function offerLlmListener(listener: net.Server, socketPath: string, timeoutMs = 5_000): Promise<boolean> {
  if (typeof process.send !== 'function' || !process.connected) return Promise.resolve(false);
  const send = process.send.bind(process);
  const offer: LlmListenerOffer = { type: 'llm-proxy.listener', seq: ++seq, socketPath };
  return new Promise<boolean>((resolve) => {
    const done = (adopted: boolean): void => {
      clearTimeout(timer);
      process.off('message', onMessage);
      resolve(adopted);
    };
    const onMessage = (msg: unknown): void => {
      const reply = LlmListenerReplySchema.safeParse(msg);
      if (reply.success && reply.data.seq === offer.seq) done(reply.data.adopted);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    process.on('message', onMessage);
    send(offer, listener, {}, (err: Error | null) => {
      if (err) done(false);
    });
  });
}
