import { choiceFlag, numberFlag, parseFlags, UsageError } from '../args.js';
import { InfraError } from '../../errors.js';
import { ensureTinyGguf } from '../../llm/gguf-writer.js';
import type { ChatCodec } from '../../llm/chat-codec.js';
import { checkEngineTokenizer, codecFor, tinyVocabFor } from '../../llm/codec-registry.js';
import { createLlamaEngine } from '../../llm/llama-engine.js';
import { startLlmHttpServer } from '../../llm/llm-http-server.js';
import { listenFailure } from '../listen-error.js';
import { createQwen3Codec } from '../../llm/qwen3-codec.js';
import { formatBanner } from '../banner.js';

const DEFAULT_CONTEXT = 4096;

const HELP = `usage: rollout llm-serve (--model PATH | --tiny) [options]

Serves a GGUF model with node-llama-cpp (CPU, prebuilt binary) over the ProRL, vLLM and SGLang
token protocols and OpenAI chat completions (messages rendered with the chat template of
--tokenizer's model directory, else Qwen3's, as the default tiny model carries the Qwen3
vocabulary), recording what it sampled (GET /debug/samples).

  --model PATH          GGUF file to serve
  --tiny                serve the tiny random-weight Qwen3-vocabulary model (written to .cache/models)
  --seed S              seed of the tiny model (default 1)
  --port P              port (default 0: a free one)
  --host H              host (default 127.0.0.1)
  --protocol P          prorl | vllm | sglang | openai | all (default all)
  --parallel N          requests evaluated at once (default 4)
  --context-size N      tokens per sequence (default 4096)
  --threads N           CPU threads (default 1)
  --weight-version V    reported weight version
  --tokenizer DIR       Hugging Face model directory: with --tiny, the tiny model carries its
                        vocabulary and template; with --model, checked against the model's at start.
                        Chat completions render and parse with its tokenizer and template
  --tool-parser NAME    tool-call format of the model (checked; default: the template's)
`;

/** `rollout llm-serve`: prints `listening on http://host:port` once ready; stops on SIGINT/SIGTERM. */
export async function run(argv: string[]): Promise<number> {
  const flags = parseFlags('llm-serve', argv, {
    model: { type: 'string' },
    tiny: { type: 'boolean' },
    seed: { type: 'string' },
    port: { type: 'string' },
    host: { type: 'string' },
    protocol: { type: 'string' },
    parallel: { type: 'string' },
    'context-size': { type: 'string' },
    threads: { type: 'string' },
    'weight-version': { type: 'string' },
    tokenizer: { type: 'string' },
    'tool-parser': { type: 'string' },
  }, HELP);
  if (typeof flags === 'number') return flags;
  const v = flags.values;
  if (!v.model && !v.tiny) {
    process.stderr.write(`rollout llm-serve: give --model PATH or --tiny\n\n${HELP}`);
    return 2;
  }
  let protocol: 'prorl' | 'vllm' | 'sglang' | 'openai' | 'all';
  let n: { seed: number; parallel: number | undefined; contextSize: number | undefined; threads: number | undefined; port: number };
  try {
    protocol = choiceFlag('protocol', v.protocol, ['prorl', 'vllm', 'sglang', 'openai', 'all'] as const) ?? 'all';
    for (const f of ['parallel', 'context-size', 'threads'] as const) {
      if (v[f] !== undefined && Number(v[f]) < 1) throw new UsageError(`--${f} must be a positive integer, got '${v[f]}'`);
    }
    n = {
      seed: numberFlag('seed', v.seed, { integer: true }) ?? 1,
      parallel: numberFlag('parallel', v.parallel, { integer: true }),
      contextSize: numberFlag('context-size', v['context-size'], { integer: true }),
      threads: numberFlag('threads', v.threads, { integer: true }),
      port: numberFlag('port', v.port, { integer: true }) ?? 0,
    };
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    process.stderr.write(`rollout llm-serve: ${e.message}\n\n${HELP}`);
    return 2;
  }
  let modelPath: string;
  try {
    modelPath = v.model ?? ensureTinyGguf({ seed: n.seed, ...(v.tokenizer ? { vocab: tinyVocabFor(v.tokenizer) } : {}) });
  } catch (e) {
    process.stderr.write(`rollout llm-serve: ${(e as Error).message}\n`);
    return 2;
  }
  // createLlamaEngine's defaults, stated here for /props and the banner.
  const slots = n.parallel ?? 4;
  let engine: Awaited<ReturnType<typeof createLlamaEngine>>;
  try {
    engine = await createLlamaEngine({ modelPath, parallel: n.parallel, contextSize: n.contextSize, threads: n.threads });
  } catch (e) {
    // The engine is an optional peer dependency: say how to install it, not a stack trace.
    if (!(e instanceof InfraError && e.code === 'ENGINE_NOT_INSTALLED')) throw e;
    process.stderr.write(`rollout llm-serve: ${e.message}\n`);
    return 1;
  }
  const bad = v.tokenizer ? checkEngineTokenizer({ tokenizer: v.tokenizer, toolParser: v['tool-parser'] }, engine.tokenize, modelPath) : null;
  if (bad) {
    process.stderr.write(`rollout llm-serve: ${bad}\n`);
    await engine.close();
    return 2;
  }
  // The chat route renders prompts and parses replies in the served model's vocabulary and
  // template: Qwen3's ids sent to another family's engine were refused (HTTP 500) or sampled
  // from the wrong vocabulary (#28). The codec was loaded (and cached) by the check above.
  let chatCodec: ChatCodec;
  try {
    chatCodec = v.tokenizer || v['tool-parser'] ? codecFor({ tokenizer: v.tokenizer, toolParser: v['tool-parser'] }) : createQwen3Codec();
  } catch (e) {
    process.stderr.write(`rollout llm-serve: ${(e as Error).message}\n`);
    await engine.close();
    return 2;
  }
  let server: Awaited<ReturnType<typeof startLlmHttpServer>>;
  try {
    server = await startLlmHttpServer({
      engine,
      host: v.host,
      port: n.port,
      protocol,
      weightVersion: v['weight-version'] ?? null,
      maxModelLen: n.contextSize ?? DEFAULT_CONTEXT,
      modelName: modelPath,
      openai: { codec: chatCodec },
      getRoutes: {
        '/debug/samples': () => ({ samples: engine.samples() }),
        '/debug/inflight': () => ({ inflight: engine.inFlight() }),
        // llama.cpp's server reports its parallel slots here; `rollout run` sizes its concurrency by it.
        '/props': () => ({ total_slots: slots, n_ctx: n.contextSize ?? DEFAULT_CONTEXT, model_path: modelPath }),
      },
    });
  } catch (e) {
    // A busy port is one line, not a stack trace (#30).
    process.stderr.write(`rollout llm-serve: ${listenFailure(e, v.host ?? '127.0.0.1', n.port)}\n`);
    await engine.close();
    return 1;
  }
  process.stdout.write(`listening on ${server.url}\n`);
  const host = new URL(server.url).host;
  const addresses: Record<string, string> = { prorl: `prorl+http://${host}`, vllm: `vllm+http://${host}`, sglang: `sglang+http://${host}`, openai: `http://${host}/v1` };
  const served = protocol === 'all' ? Object.keys(addresses) : [protocol];
  process.stdout.write(
    formatBanner([
      ['model', `${modelPath}${v.tiny ? ` (tiny random weights, ${v.tokenizer ? 'the vocabulary of --tokenizer' : 'Qwen3 vocabulary'})` : ''}`],
      ['backends', served.map((p) => addresses[p]).join(', ')],
      ['slots', `${slots} requests at once (--parallel), context ${n.contextSize ?? DEFAULT_CONTEXT} tokens`],
      ['tokenizer', v.tokenizer ? `${v.tokenizer} (its template for chat)` : 'the model\'s own (Qwen3 template for chat)'],
      ['use it', `rollout run TASKS.jsonl --backend ${addresses[served[0]!]}`],
    ]),
  );
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  await server.close();
  await engine.close();
  return 0;
}
