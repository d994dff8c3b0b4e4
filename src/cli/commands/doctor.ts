import { parseFlags } from '../args.js';
import { backendCheck, checkCgroups, checkDisk, checkNode, checkSandbox, formatCheck, probeBackends, type Check } from '../preflight.js';
import { createQwen3Codec } from '../../llm/qwen3-codec.js';

const USAGE = `usage: rollout doctor [--backend ADDRESS ...] [--timeout-ms N]

Checks that this machine can run rollouts and that each backend answers with the protocol its
address names: node, the sandbox driver (bwrap), cgroups for per-sandbox totals, free disk, and
for every --backend: reachable, the right protocol (a ProRL address at a vLLM server gets
"use vllm+http://…"), its model, and its tokenizer against ours when the server can tokenize.

Exit status: 0 when nothing failed, 1 when a check failed, 2 on bad usage.

options:
  --backend ADDRESS   an inference server to probe (repeatable)
  --timeout-ms N      per request to a backend (default 3000)
  -h, --help          this text
`;

/** `rollout doctor`: pre-flight checks, one line each. */
export async function run(argv: string[]): Promise<number> {
  const parsed = parseFlags('doctor', argv, { backend: { type: 'string', multiple: true }, 'timeout-ms': { type: 'string' } }, USAGE);
  if (typeof parsed === 'number') return parsed;
  const timeoutMs = Number(parsed.values['timeout-ms'] ?? 3000);
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1) {
    process.stderr.write(`rollout doctor: --timeout-ms must be a positive integer, got '${parsed.values['timeout-ms']}'\n`);
    return 2;
  }
  const checks: Check[] = [checkNode(), checkSandbox(), checkCgroups(), checkDisk()];
  for (const c of checks) process.stdout.write(`${formatCheck(c)}\n`);
  const backends = parsed.values.backend ?? [];
  if (backends.length === 0) process.stdout.write('      (no --backend given: backends not checked)\n');
  else {
    const codec = createQwen3Codec();
    for (const p of await probeBackends(backends, { timeoutMs, encode: (t) => codec.encode(t) })) {
      const c = backendCheck(p);
      checks.push(c);
      process.stdout.write(`${formatCheck(c)}\n`);
    }
  }
  const failed = checks.filter((c) => c.status === 'fail').length;
  process.stdout.write(failed === 0 ? 'all checks passed\n' : `${failed} check(s) failed\n`);
  return failed === 0 ? 0 : 1;
}
