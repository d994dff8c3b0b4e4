import { parseArgs } from 'node:util';
import { ensureTinyGguf } from '../../llm/gguf-writer.js';
import { createLlamaEngine } from '../../llm/llama-engine.js';
import { startLlmHttpServer } from '../../llm/llm-http-server.js';

const HELP = `usage: rollout llm-serve (--model PATH | --tiny) [options]

Serves a GGUF model with node-llama-cpp (CPU, prebuilt binary) over the ProRL, vLLM and SGLang
token protocols, recording what it sampled (GET /debug/samples).

  --model PATH          GGUF file to serve
  --tiny                serve the tiny random-weight Qwen3-vocabulary model (written to .cache/models)
  --seed S              seed of the tiny model (default 1)
  --port P              port (default 0: a free one)
  --host H              host (default 127.0.0.1)
  --protocol P          prorl | vllm | sglang | all (default all)
  --parallel N          requests evaluated at once (default 4)
  --context-size N      tokens per sequence (default 4096)
  --threads N           CPU threads (default 1)
  --weight-version V    reported weight version
`;

/** `rollout llm-serve`: prints `listening on http://host:port` once ready; stops on SIGINT/SIGTERM. */
export async function run(argv: string[]): Promise<number> {
  let v;
  try {
    v = parseArgs({
      args: argv,
      options: {
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
        help: { type: 'boolean', short: 'h' },
      },
    }).values;
  } catch (e) {
    process.stderr.write(`rollout llm-serve: ${(e as Error).message}\n\n${HELP}`);
    return 2;
  }
  if (v.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const protocol = v.protocol ?? 'all';
  if (!['prorl', 'vllm', 'sglang', 'all'].includes(protocol) || (!v.model && !v.tiny)) {
    process.stderr.write(`rollout llm-serve: ${!v.model && !v.tiny ? 'give --model PATH or --tiny' : `unknown protocol ${protocol}`}\n\n${HELP}`);
    return 2;
  }
  const modelPath = v.model ?? ensureTinyGguf({ seed: v.seed ? Number(v.seed) : 1 });
  const engine = await createLlamaEngine({
    modelPath,
    parallel: v.parallel ? Number(v.parallel) : undefined,
    contextSize: v['context-size'] ? Number(v['context-size']) : undefined,
    threads: v.threads ? Number(v.threads) : undefined,
  });
  const server = await startLlmHttpServer({
    engine,
    host: v.host,
    port: v.port ? Number(v.port) : 0,
    protocol: protocol as 'all',
    weightVersion: v['weight-version'] ?? null,
    modelName: modelPath,
    getRoutes: { '/debug/samples': () => ({ samples: engine.samples() }) },
  });
  process.stdout.write(`listening on ${server.url}\n`);
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  await server.close();
  await engine.close();
  return 0;
}
