import { afterEach, describe, expect, it, vi } from 'vitest';

/**
 * The audit of #16.4: every command, given a bad flag value, exits 2 and says which flag and
 * what it allows — before it starts anything (no server, engine, Redis or sandbox is reached).
 */
type Command = { run(argv: string[]): Promise<number> };
const commands: Record<string, () => Promise<Command>> = {
  run: () => import('../../../src/cli/commands/run.js'),
  serve: () => import('../../../src/cli/commands/serve.js'),
  'llm-serve': () => import('../../../src/cli/commands/llm-serve.js'),
  'fake-llm': () => import('../../../src/cli/commands/fake-llm.js'),
  doctor: () => import('../../../src/cli/commands/doctor.js'),
  worker: () => import('../../../src/cli/commands/worker.js'),
  image: () => import('../../../src/cli/commands/image.js'),
  harness: () => import('../../../src/cli/commands/harness.js'),
};
const load = (name: string): Promise<Command> => commands[name]!();

afterEach(() => vi.restoreAllMocks());

async function stderrOf(name: string, argv: string[]): Promise<{ code: number; err: string }> {
  let err = '';
  vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
    err += String(chunk);
    return true;
  });
  vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
  const code = await (await load(name)).run(argv);
  vi.restoreAllMocks();
  return { code, err: err.split('\n')[0]! };
}

const cases: Array<[string, string[], RegExp]> = [
  ['run', ['t.jsonl', '--sandbox', 'docker'], /--sandbox must be bwrap, unshare, none or auto, got 'docker'/],
  ['run', ['t.jsonl', '--temperature', '3'], /--temperature must be a number in \[0, 2\], got '3'/],
  ['run', ['t.jsonl', '--top-p', '0'], /--top-p must be a number in \(0, 1\], got '0'/],
  ['run', ['t.jsonl', '--n', '0'], /--n must be a positive integer, got '0'/],
  ['run', ['t.jsonl', '--concurrency', 'many'], /--concurrency must be a positive integer, got 'many'/],
  ['run', ['t.jsonl', '--max-tokens=-5'], /--max-tokens must be a positive integer, got '-5'/],
  ['run', ['t.jsonl', '--tool-parser', 'hermez'], /--tool-parser must be one of hermes, .*; got 'hermez'/],
  ['serve', ['--sandbox', 'docker'], /--sandbox must be auto, bwrap, unshare or none, got 'docker'/],
  ['serve', ['--port', 'eighty'], /--port must be a non-negative integer, got 'eighty'/],
  ['serve', ['--timeout=-1'], /--timeout must be a positive number of seconds, got '-1'/],
  ['serve', ['--max-run-workers', '0'], /--max-run-workers must be at least 1, got '0'/],
  ['serve', ['--inspect', 'http://127.0.0.1:1'], /--inspect must be a ws:\/\/ or wss:\/\/ URL, got 'http:\/\/127.0.0.1:1'/],
  ['serve', ['--inspect', 'ws://127.0.0.1:1', '--inspect-sample', '2'], /--inspect-sample must be a number in \[0, 1\], got '2'/],
  ['llm-serve', ['--tiny', '--protocol', 'grpc'], /--protocol must be one of prorl, vllm, sglang, openai, all; got 'grpc'/],
  ['llm-serve', ['--tiny', '--parallel', '0'], /--parallel must be a positive integer, got '0'/],
  ['fake-llm', ['--protocol', 'vlm'], /--protocol must be one of prorl, vllm, sglang, openai, all; got 'vlm' \(did you mean vllm\?\)/],
  ['fake-llm', ['--policy', 'greedy'], /--policy must be one of scripted, random; got 'greedy'/],
  ['doctor', ['--timeout-ms', 'soon'], /--timeout-ms must be a positive integer, got 'soon'/],
  ['worker', ['--redis', 'redis://127.0.0.1:1', '--sandbox', 'docker'], /--sandbox must be auto, bwrap, unshare, none, got 'docker'/],
  ['worker', ['--redis', 'redis://127.0.0.1:1', '--capacity', '0'], /--capacity must be at least 1/],
  ['image', ['rmi', 'x'], /unknown image command 'rmi': one of import, ls, rm, prune/],
  ['image', ['prune', '--max-size', 'big'], /--max-size must be a size like 20G or 500M, got 'big'/],
  ['image', ['prune', '--max-siz', '1G'], /unknown option '--max-siz' \(did you mean --max-size\?\)/],
  ['harness', ['instal', 'codex'], /unknown harness command 'instal': one of install, ls, rm/],
  ['harness', ['ls', '--jsn'], /unknown option '--jsn' \(did you mean --json\?\)/],
];

describe('every bad flag value names the flag and what it allows, and exits 2', () => {
  it.each(cases)('rollout %s %j', async (name, argv, expected) => {
    const r = await stderrOf(name, argv);
    expect(r.err).toMatch(expected);
    expect(r.code).toBe(2);
  });
});
