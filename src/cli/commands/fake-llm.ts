import { parseArgs } from 'node:util';
import { startFakeLlmServer } from '../../testing/fake-llm-server.js';

const HELP = `usage: rollout fake-llm [options]

A fake inference server with the real Qwen3 tokenizer, speaking the ProRL, vLLM and SGLang token
protocols. Prints "listening on http://host:port" once ready.

  --port P              port (default 0: a free one)
  --host H              host (default 127.0.0.1)
  --protocol P          prorl | vllm | sglang | all (default all)
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
`;

/** `rollout fake-llm`: runs until SIGINT/SIGTERM or `--exit-after`. */
export async function run(argv: string[]): Promise<number> {
  let v;
  try {
    v = parseArgs({
      args: argv,
      options: {
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
        help: { type: 'boolean', short: 'h' },
      },
    }).values;
  } catch (e) {
    process.stderr.write(`rollout fake-llm: ${(e as Error).message}\n\n${HELP}`);
    return 2;
  }
  if (v.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const num = (s: string | undefined): number | undefined => {
    if (s === undefined) return undefined;
    const n = Number(s);
    if (!Number.isFinite(n)) throw new Error(`not a number: ${s}`);
    return n;
  };
  const protocol = v.protocol ?? 'all';
  const policy = v.policy;
  if (!['prorl', 'vllm', 'sglang', 'all'].includes(protocol) || (policy !== undefined && policy !== 'scripted' && policy !== 'random')) {
    process.stderr.write(`rollout fake-llm: bad --protocol or --policy\n\n${HELP}`);
    return 2;
  }
  if (policy === 'scripted' && !v.tasks) {
    process.stderr.write('rollout fake-llm: --policy scripted needs --tasks FILE.jsonl\n');
    return 2;
  }
  let exited: () => void = () => {};
  const exitPromise = new Promise<void>((resolve) => (exited = resolve));
  let server;
  try {
    server = await startFakeLlmServer({
      port: num(v.port) ?? 0,
      host: v.host,
      protocol: protocol as 'all',
      tasks: v.tasks,
      policy: policy as 'scripted' | 'random' | undefined,
      latencyMs: num(v['latency-ms']),
      perTokenMs: num(v['per-token-ms']),
      maxConcurrent: num(v['max-concurrent']),
      errorRate: num(v['error-rate']),
      hangRate: num(v['hang-rate']),
      exitAfter: num(v['exit-after']),
      onExit: () => exited(),
      seed: num(v.seed),
      weightVersion: v['weight-version'] ?? null,
      maxModelLen: num(v['max-model-len']),
    });
  } catch (e) {
    process.stderr.write(`rollout fake-llm: ${(e as Error).message}\n`);
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
