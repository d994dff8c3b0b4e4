import { readFileSync } from 'node:fs';
import { sleep, systemClock, type Clock } from '../clock.js';
import type http from 'node:http';
import { InstanceSchema, type Instance } from '../protocol/instance.js';
import type { HfChatCodec } from '../llm/hf-codec.js';
import { createQwen3Codec } from '../llm/qwen3-codec.js';
import { EngineHttpError, startLlmHttpServer, type Engine, type EngineRequest, type EngineResult } from '../llm/llm-http-server.js';
import { hashString, randomEngine, scriptedEngine, xorshift32 } from './fake-llm-policies.js';

/** Options of {@link startFakeLlmServer} (the flags of `rollout fake-llm`). */
export interface FakeLlmServerOptions {
  /** 0 (default) picks a free port. */
  port?: number | undefined;
  host?: string | undefined;
  /** `all` (default) serves every protocol, OpenAI chat completions included. */
  protocol?: 'prorl' | 'vllm' | 'sglang' | 'openai' | 'all' | undefined;
  /**
   * OpenAI chat completions: answer vLLM's `return_token_ids` with the sampled and prompt ids
   * (default true). false: act as a stock OpenAI endpoint — a request carrying `return_token_ids`
   * is refused with a 400 naming it, and no ids are sent (the client re-tokenizes).
   */
  openaiTokenIds?: boolean | undefined;
  /** Instances for the scripted policy: an array, or a JSONL file path (keyed by `instance_id`). */
  tasks?: Instance[] | string | undefined;
  /** `scripted` (default when tasks are given) or `random` (default otherwise), or any engine. */
  policy?: 'scripted' | 'random' | Engine | undefined;
  /** Fixed latency per request. */
  latencyMs?: number | undefined;
  /** The clock of the latencies. Default the system clock. */
  clock?: Clock | undefined;
  /** Latency per output token, added to `latencyMs`. */
  perTokenMs?: number | undefined;
  /**
   * Requests served at once, like an inference engine's batch capacity; later ones wait in
   * arrival order (their wait counts in their latency). Default unlimited.
   */
  maxConcurrent?: number | undefined;
  /** Fraction of generation requests answered with a 500. */
  errorRate?: number | undefined;
  /** Fraction of generation requests never answered (until the client gives up). */
  hangRate?: number | undefined;
  /** After answering this many generation requests the server goes away: connections destroyed, port closed, `onExit` called. Later requests are dropped. */
  exitAfter?: number | undefined;
  onExit?: (() => void) | undefined;
  /** Seeds the random policy and the failure draws. */
  seed?: number | undefined;
  weightVersion?: string | number | null | undefined;
  /** Prompt + max_tokens beyond this is refused with a 400 ("maximum context length"), as vLLM does. */
  maxModelLen?: number | undefined;
  /** The codec; default Qwen3 (the real tokenizer). */
  codec?: HfChatCodec | undefined;
}

/** A running fake server. */
export interface FakeLlmServer {
  readonly url: string;
  readonly port: number;
  /** Generation requests received. */
  readonly requests: number;
  weightVersion: string | number | null;
  /**
   * When set, a generation longer than this many tokens samples that many (after its latency)
   * and then holds until `/abort_request` (or its client leaves): a test's abort lands at a known
   * token instead of a guessed time. null (default): no hold.
   */
  holdAtTokens: number | null;
  /** Generations held at `holdAtTokens` right now: what a test waits on before it aborts. */
  readonly held: number;
  close(): Promise<void>;
}

/** Reads a JSONL task file into instances keyed by `instance_id` (lines without one are skipped). */
export function loadTaskFile(path: string): Instance[] {
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l.trim().length > 0)
    .map((l) => InstanceSchema.parse(JSON.parse(l)));
}

/**
 * An HTTP inference server for tests, benchmarks and the demo, tokenizing with the real
 * tokenizer and speaking the ProRL, vLLM and SGLang token protocols and OpenAI chat completions
 * (see `llm-http-server.ts`).
 * Failure injection draws from a generator seeded by `seed` in request order. Resolves once
 * listening; `close()` destroys every connection.
 */
export async function startFakeLlmServer(opts: FakeLlmServerOptions = {}): Promise<FakeLlmServer> {
  const codec = opts.codec ?? createQwen3Codec();
  const tasks = typeof opts.tasks === 'string' ? loadTaskFile(opts.tasks) : (opts.tasks ?? []);
  const byId = new Map<string, Instance>();
  for (const t of tasks) if (t.instance_id !== undefined) byId.set(String(t.instance_id), t);
  const policy = opts.policy ?? (tasks.length > 0 ? 'scripted' : 'random');
  const inner: Engine = typeof policy === 'object' ? policy : policy === 'scripted' ? scriptedEngine(codec, byId) : randomEngine(codec, { seed: opts.seed ?? 0 });
  const latencyMs = opts.latencyMs ?? 0;
  const perTokenMs = opts.perTokenMs ?? 0;
  const clock = opts.clock ?? systemClock;
  const maxConcurrent = opts.maxConcurrent ?? Infinity;
  /** Partial outputs of aborted generations, by instance, turn and the prompt length a continuation will have. */
  const partials = new Map<string, { ids: number[] }>();
  let active = 0;
  let holdAtTokens: number | null = null;
  let held = 0;
  const waiting: (() => void)[] = [];
  let waitHead = 0;

  /** The answer of a generation aborted after `k` tokens, kept for its continuation. */
  const abortedAt = (req: EngineRequest, out: EngineResult, k: number): EngineResult => {
    const ids = out.outputIds.slice(0, k);
    partials.set(`${req.instanceId}|${req.turn}|${req.promptIds.length + k}`, { ids });
    return { outputIds: ids, logprobs: out.logprobs.slice(0, k), finishReason: 'abort' };
  };

  const engine: Engine = {
    decode: inner.decode ?? ((ids) => codec.decode(ids)),
    async generate(req: EngineRequest): Promise<EngineResult> {
      if (opts.maxModelLen !== undefined && req.promptIds.length + req.maxTokens > opts.maxModelLen) {
        throw new EngineHttpError(400, `This model's maximum context length is ${opts.maxModelLen} tokens; the prompt has ${req.promptIds.length} and max_tokens is ${req.maxTokens}`);
      }
      // A finishing request hands its slot straight to the next waiter, so capacity is never exceeded.
      if (active < maxConcurrent) active++;
      else await new Promise<void>((resolve) => waiting.push(resolve));
      try {
        // A continuation of a generation this server aborted: the same request as before (the
        // engines are deterministic), minus the ids already handed out.
        const key = `${req.instanceId}|${req.turn}|${req.promptIds.length}`;
        const resumed = partials.get(key);
        const given = resumed && sameTail(req.promptIds, resumed.ids) ? resumed.ids.length : 0;
        if (resumed) partials.delete(key);
        const full = await inner.generate(given ? { ...req, promptIds: req.promptIds.slice(0, -given), maxTokens: req.maxTokens + given } : req);
        const out: EngineResult = given ? { ...full, outputIds: full.outputIds.slice(given), logprobs: full.logprobs.slice(given) } : full;
        const hold = holdAtTokens;
        if (hold !== null && hold < out.outputIds.length && req.engineAbort) {
          const signal = AbortSignal.any([req.signal, req.engineAbort]);
          // An abort ends the hold early (the sleep rejects); `signal.aborted` below tells which.
          await sleep(clock, latencyMs + perTokenMs * hold, signal).catch(() => undefined);
          if (!signal.aborted) {
            held++;
            await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
            held--;
          }
          if (!req.engineAbort.aborted || req.signal.aborted) return out;
          return abortedAt(req, out, hold);
        }
        const ms = latencyMs + perTokenMs * out.outputIds.length;
        const t0 = clock.now();
        // An abort ends the latency early: the partial answer below is what was sampled by then.
        if (ms > 0) await sleep(clock, ms, req.engineAbort ? AbortSignal.any([req.signal, req.engineAbort]) : req.signal).catch(() => undefined);
        if (!req.engineAbort?.aborted || req.signal.aborted) return out;
        // Aborted by /abort_request: what was sampled by now (perTokenMs per token after latencyMs).
        return abortedAt(req, out, perTokenMs > 0 ? Math.max(0, Math.min(out.outputIds.length - 1, Math.floor((clock.now() - t0 - latencyMs) / perTokenMs))) : 0);
      } finally {
        if (waitHead < waiting.length) {
          waiting[waitHead++]!();
          if (waitHead > 1024 && waitHead * 2 > waiting.length) {
            waiting.splice(0, waitHead);
            waitHead = 0;
          }
        } else active--;
      }
    },
  };

  const faults = xorshift32(hashString(`faults|${opts.seed ?? 0}`));
  let server: Awaited<ReturnType<typeof startLlmHttpServer>> | undefined;
  const intercept = (n: number, res: http.ServerResponse): 'pass' | 'handled' => {
    if (opts.exitAfter !== undefined && n > opts.exitAfter) {
      res.destroy();
      return 'handled';
    }
    if (opts.exitAfter !== undefined && n === opts.exitAfter) {
      // The Nth request is answered; then the server goes away as a process exit would.
      res.once('close', () => void server?.close().then(() => opts.onExit?.()));
      return 'pass';
    }
    if (opts.errorRate && faults() < opts.errorRate) {
      res.writeHead(500, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'injected failure' }));
      return 'handled';
    }
    // A hung request is simply never answered; close() destroys its connection.
    if (opts.hangRate && faults() < opts.hangRate) return 'handled';
    return 'pass';
  };
  server = await startLlmHttpServer({
    engine,
    host: opts.host,
    port: opts.port,
    protocol: opts.protocol,
    weightVersion: opts.weightVersion ?? null,
    maxModelLen: opts.maxModelLen,
    intercept,
    openai: { codec, returnTokenIds: opts.openaiTokenIds ?? true },
  });
  const s = server;
  return {
    url: s.url,
    port: s.port,
    get requests() {
      return s.requests;
    },
    get weightVersion() {
      return s.weightVersion;
    },
    set weightVersion(v) {
      s.weightVersion = v;
    },
    get holdAtTokens() {
      return holdAtTokens;
    },
    set holdAtTokens(n) {
      holdAtTokens = n;
    },
    get held() {
      return held;
    },
    close: () => s.close(),
  };
}

function sameTail(prompt: readonly number[], tail: readonly number[]): boolean {
  const off = prompt.length - tail.length;
  for (let i = 0; i < tail.length; i++) if (prompt[off + i] !== tail[i]) return false;
  return true;
}

