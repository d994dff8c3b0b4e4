import { EngineHttpError, type Engine, type EngineRequest, type EngineResult } from './llm-http-server.js';
import { InfraError } from '../errors.js';

/** Options of {@link createLlamaEngine}. */
export interface LlamaEngineOptions {
  modelPath: string;
  /** Requests evaluated at once (context sequences). Default 4. */
  parallel?: number | undefined;
  /** Tokens per sequence. Default 4096. */
  contextSize?: number | undefined;
  /** CPU threads; 1 by default so tests stay deterministic in cost and light on CI. */
  threads?: number | undefined;
  /** Samples kept for `GET /debug/samples` (oldest dropped first). Default 10,000. */
  keepSamples?: number | undefined;
}

/** One generation as the engine sampled it, for a test to compare with what the client got. */
export interface LlamaSample {
  seq: number;
  instanceId: string | null;
  turn: number | null;
  promptIds: number[];
  outputIds: number[];
  logprobs: number[];
  finishReason: 'stop' | 'length' | 'abort';
}

/** A node-llama-cpp engine with its sample log. */
export interface LlamaEngine extends Engine {
  /** Recorded samples, oldest first. */
  samples(): LlamaSample[];
  /**
   * The generations sampling now (`GET /debug/inflight`) with the tokens each has sampled so
   * far: what a test waits on before it aborts a generation mid-way.
   */
  inFlight(): { instanceId: string | null; turn: number | null; tokens: number }[];
  /** Ids of text with the model's own tokenizer, special tokens parsed, no BOS. */
  tokenize(text: string): number[];
  close(): Promise<void>;
}

/** What to do when node-llama-cpp is missing: it is an optional peer dependency (README, Dependencies). */
export const LLAMA_INSTALL_HINT =
  'node-llama-cpp is not installed. It is an optional peer dependency of rollout-runtime, needed only by `rollout llm-serve` ' +
  '(its prebuilt CPU/CUDA/Vulkan binaries take ~700 MB, so a plain install leaves it out). Install it beside rollout-runtime: ' +
  'npm install --save-exact node-llama-cpp@3.21.1';

/**
 * Imports node-llama-cpp, loaded only here so nothing else pays for it.
 * @throws InfraError `ENGINE_NOT_INSTALLED` (saying how to install it) when the package is absent.
 */
async function loadNodeLlamaCpp(): Promise<typeof import('node-llama-cpp')> {
  try {
    return await import('node-llama-cpp');
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if (e.code === 'ERR_MODULE_NOT_FOUND' && e.message.includes("'node-llama-cpp'")) throw new InfraError(LLAMA_INSTALL_HINT, { code: 'ENGINE_NOT_INSTALLED', cause: err });
    throw err;
  }
}

/**
 * Serves a GGUF model with node-llama-cpp 3.21.1 from its prebuilt CPU binary (`build: 'never'`,
 * nothing downloaded). Each request takes a free context sequence (waiting in arrival order when
 * all are busy), resets it to the prompt, and samples token by token with `topK: 0, topP: 1,
 * minP: 0` so the reported probability of each sampled token is over the full vocabulary (the
 * logprob is its log). Generation stops after an end-of-generation token (kept in the output,
 * as the chat codec expects) or at `max_tokens`. A prompt that does not fit is a 400.
 *
 * @throws InfraError `ENGINE_NOT_INSTALLED` when node-llama-cpp is not installed; Error when the
 * binary cannot load or the model file is not a valid GGUF.
 */
export async function createLlamaEngine(opts: LlamaEngineOptions): Promise<LlamaEngine> {
  const { getLlama, TokenBias } = await loadNodeLlamaCpp();
  const llama = await getLlama({ gpu: false, build: 'never', skipDownload: true, progressLogs: false, logLevel: 'error' as never });
  const model = await llama.loadModel({ modelPath: opts.modelPath });
  const parallel = opts.parallel ?? 4;
  const contextSize = opts.contextSize ?? 4096;
  const context = await model.createContext({ contextSize, sequences: parallel, threads: opts.threads ?? 1 });
  const free = Array.from({ length: parallel }, () => context.getSequence());
  const waiting: ((s: (typeof free)[number]) => void)[] = [];
  const keep = opts.keepSamples ?? 10_000;
  const log: LlamaSample[] = [];
  const sampling = new Set<{ instanceId: string | null; turn: number | null; outputIds: number[] }>();
  let seq = 0;
  let closed = false;

  const acquire = async () => free.pop() ?? new Promise<(typeof free)[number]>((resolve) => waiting.push(resolve));
  const release = (s: (typeof free)[number]): void => {
    const next = waiting.shift();
    if (next) next(s);
    else free.push(s);
  };

  return {
    decode: (ids) => model.detokenize(ids as never, true),
    tokenize: (text) => [...model.tokenize(text, true)] as number[],
    samples: () => log.slice(),
    inFlight: () => [...sampling].map((g) => ({ instanceId: g.instanceId, turn: g.turn, tokens: g.outputIds.length })),
    async generate(req: EngineRequest): Promise<EngineResult> {
      if (closed) throw new EngineHttpError(503, 'engine is closing');
      if (req.promptIds.length + req.maxTokens > contextSize) {
        throw new EngineHttpError(400, `maximum context length is ${contextSize} tokens; the prompt has ${req.promptIds.length} and max_tokens is ${req.maxTokens}`);
      }
      const s = await acquire();
      // Aborted while it waited for a sequence: nothing sampled, resumed whole by the client.
      if (req.engineAbort?.aborted) {
        release(s);
        return { outputIds: [], logprobs: [], finishReason: 'abort' };
      }
      const outputIds: number[] = [];
      const live = { instanceId: req.instanceId, turn: req.turn, outputIds };
      sampling.add(live);
      try {
        await s.clearHistory();
        const logprobs: number[] = [];
        let finishReason: EngineResult['finishReason'] = 'length';
        const it = s.evaluateWithMetadata(req.promptIds as never, { confidence: true }, {
          temperature: req.temperature,
          topK: 0,
          topP: 1,
          minP: 0,
          ...(req.seed !== null ? { seed: req.seed } : {}),
          ...(req.logitBias ? { tokenBias: biasOf(new TokenBias(model.tokenizer), req.logitBias) } : {}),
          // Without it node-llama-cpp ends the iteration before yielding the end-of-generation
          // token: a natural stop would come back as `length` without the token, and the
          // policy's decision to stop would never be trained.
          yieldEogToken: true,
        });
        for await (const r of it) {
          const id = r.token as unknown as number;
          outputIds.push(id);
          logprobs.push(Math.log(r.confidence));
          if (model.isEogToken(r.token)) {
            finishReason = 'stop';
            break;
          }
          if (outputIds.length >= req.maxTokens || req.signal.aborted) break;
          // SGLang's /abort_request: answer what was sampled so far; the client resumes it on prompt + these ids.
          if (req.engineAbort?.aborted) {
            finishReason = 'abort';
            break;
          }
        }
        const sample: LlamaSample = { seq: ++seq, instanceId: req.instanceId, turn: req.turn, promptIds: req.promptIds, outputIds, logprobs, finishReason };
        log.push(sample);
        if (log.length > keep) log.splice(0, log.length - keep);
        return { outputIds, logprobs, finishReason };
      } finally {
        sampling.delete(live);
        release(s);
      }
    },
    async close() {
      closed = true;
      await context.dispose();
      await model.dispose();
      await llama.dispose();
    },
  };
}

/**
 * OpenAI's `logit_bias` as a node-llama-cpp TokenBias. `TokenBias.set` silently skips
 * end-of-generation tokens, but OpenAI servers bias them like any other (a test forces a natural
 * stop that way), so those go into its bias map directly — node-llama-cpp 3.21.1 reads that map
 * as is (pinned version).
 */
function biasOf<B extends object>(bias: B, logitBias: Readonly<Record<number, number>>): B {
  const map = (bias as unknown as { _biases?: Map<number, number> })._biases;
  for (const [id, logit] of Object.entries(logitBias)) {
    if (map instanceof Map) map.set(Number(id), logit);
    else (bias as unknown as { set(t: number, b: { logit: number }): void }).set(Number(id), { logit });
  }
  return bias;
}
