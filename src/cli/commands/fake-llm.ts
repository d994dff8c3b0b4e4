import { choiceFlag, numberFlag, parseFlags, UsageError } from '../args.js';
import { startFakeLlmServer } from '../../testing/fake-llm-server.js';
import { codecFor } from '../../llm/codec-registry.js';
import { listenFailure } from '../listen-error.js';

const HELP = `usage: rollout fake-llm [options]

A fake inference server with the real Qwen3 tokenizer, speaking the ProRL, vLLM and SGLang token
protocols and OpenAI chat completions. Prints "listening on http://host:port" once ready.

  --port P              port (default 0: a free one)
  --host H              host (default 127.0.0.1)
  --protocol P          prorl | vllm | sglang | openai | all (default all)
  --no-token-ids        openai: act as a stock OpenAI endpoint (refuse return_token_ids, send no
                        token ids; the client re-tokenizes)
  --tasks FILE.jsonl    instances for the scripted policy (keyed by instance_id)
  --policy P            scripted | random (default scripted with --tasks, else random)
  --latency-ms N        fixed latency per request
  --per-token-ms N      latency per output token
  --max-concurrent N    requests served at once; the rest queue (default unlimited)
  --error-rate R        fraction of requests answered 500
  --hang-rate R         fraction of requests never answered
  --exit-after N        exit once the Nth generation request is answered
  --seed S              seed of the random policy and of the failure draws
  --weight-version V    reported weight version
  --max-model-len N     refuse (400) prompts + max_tokens beyond N
  --tokenizer DIR       Hugging Face model directory whose tokenizer and template it uses (default Qwen3)
  --tool-parser NAME    hermes | qwen3_coder | llama3_json | mistral | deepseek_v3 | openai (default: the template's)
`;

/** `rollout fake-llm`: runs until SIGINT/SIGTERM or `--exit-after`. */
export async function run(argv: string[]): Promise<number> {
  const flags = parseFlags('fake-llm', argv, {
    port: { type: 'string' },
    host: { type: 'string' },
    protocol: { type: 'string' },
    tasks: { type: 'string' },
    policy: { type: 'string' },
    'latency-ms': { type: 'string' },
    'per-token-ms': { type: 'string' },
    'max-concurrent': { type: 'string' },
    'error-rate': { type: 'string' },
    'hang-rate': { type: 'string' },
    'exit-after': { type: 'string' },
    seed: { type: 'string' },
    'weight-version': { type: 'string' },
    'max-model-len': { type: 'string' },
    'no-token-ids': { type: 'boolean' },
    tokenizer: { type: 'string' },
    'tool-parser': { type: 'string' },
  }, HELP);
  if (typeof flags === 'number') return flags;
  const v = flags.values;
  let protocol: 'prorl' | 'vllm' | 'sglang' | 'openai' | 'all';
  let policy: 'scripted' | 'random' | undefined;
  try {
    protocol = choiceFlag('protocol', v.protocol, ['prorl', 'vllm', 'sglang', 'openai', 'all'] as const) ?? 'all';
    policy = choiceFlag('policy', v.policy, ['scripted', 'random'] as const);
  } catch (e) {
    process.stderr.write(`rollout fake-llm: ${(e as Error).message}\n\n${HELP}`);
    return 2;
  }
  if (policy === 'scripted' && !v.tasks) {
    process.stderr.write('rollout fake-llm: --policy scripted needs --tasks FILE.jsonl\n');
    return 2;
  }
  let exited: () => void = () => {};
  const exitPromise = new Promise<void>((resolve) => (exited = resolve));
  let config: Parameters<typeof startFakeLlmServer>[0];
  try {
    config = {
      port: numberFlag('port', v.port, { integer: true }) ?? 0,
      host: v.host,
      protocol,
      tasks: v.tasks,
      policy,
      latencyMs: numberFlag('latency-ms', v['latency-ms']),
      perTokenMs: numberFlag('per-token-ms', v['per-token-ms']),
      maxConcurrent: numberFlag('max-concurrent', v['max-concurrent'], { integer: true }),
      errorRate: numberFlag('error-rate', v['error-rate']),
      hangRate: numberFlag('hang-rate', v['hang-rate']),
      exitAfter: numberFlag('exit-after', v['exit-after'], { integer: true }),
      onExit: () => exited(),
      seed: numberFlag('seed', v.seed),
      weightVersion: v['weight-version'] ?? null,
      maxModelLen: numberFlag('max-model-len', v['max-model-len'], { integer: true }),
      openaiTokenIds: !v['no-token-ids'],
    };
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    process.stderr.write(`rollout fake-llm: ${e.message}\n\n${HELP}`);
    return 2;
  }
  let server;
  try {
    if (v.tokenizer || v['tool-parser']) config.codec = codecFor({ tokenizer: v.tokenizer, toolParser: v['tool-parser'] });
    server = await startFakeLlmServer(config);
  } catch (e) {
    const listening = (e as NodeJS.ErrnoException).syscall === 'listen';
    process.stderr.write(`rollout fake-llm: ${listening ? listenFailure(e, config.host ?? '127.0.0.1', config.port ?? 0) : (e as Error).message}\n`);
    return 1;
  }
  process.stdout.write(`listening on ${server.url}\n`);
  const onSignal = (): void => exited();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  await exitPromise;
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  await server.close();
  return 0;
}
