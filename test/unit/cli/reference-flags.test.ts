import { describe, expect, it } from 'vitest';
import { referenceArgv } from '../../../src/cli/reference-flags.js';
import { UsageError } from '../../../src/cli/args.js';

// Issue #28 §2.3: the reference's start_server.py flags, as its scripts pass them.
const OURS = ['host', 'port', 'backend', 'token', 'timeout', 'max-init-workers', 'max-run-workers', 'max-eval-workers', 'stopped', 'insecure'];

describe('referenceArgv', () => {
  it("takes run_math.py's --reward-server-ip with no value, and with several", () => {
    expect(referenceArgv(['--reward-server-ip', '--port', '0'], OURS)).toEqual({ argv: ['--port=0'], notes: [expect.stringMatching(/^--reward-server-ip has no effect/)] });
    const many = referenceArgv(['--reward-server-ip', '10.0.0.1', '10.0.0.2', '--stopped'], OURS);
    expect(many.argv).toEqual(['--stopped']);
    expect(many.notes[0]).toContain('given 10.0.0.1 10.0.0.2');
  });

  it("reads --allow-skip-eval's value as Python's bool() does (False is True), ignored with one note", () => {
    const r = referenceArgv(['--allow-skip-eval', 'False', '--timeout', '300'], OURS);
    expect(r.argv).toEqual(['--timeout=300']);
    expect(r.notes).toEqual([expect.stringMatching(/^--allow-skip-eval has no effect .*'False', which argparse reads as True/)]);
    expect(referenceArgv(['--allow-skip-eval='], OURS).notes[0]).toMatch(/reads as False/);
    // Alone, as earlier releases of ours took it.
    expect(referenceArgv(['--allow-skip-eval'], OURS)).toMatchObject({ argv: [], notes: [expect.stringMatching(/--allow-skip-eval has no effect/)] });
  });

  it('takes --use-thread-based-server as a switch, and refuses a value for it as argparse does', () => {
    expect(referenceArgv(['--use-thread-based-server'], OURS)).toEqual({ argv: [], notes: [expect.stringMatching(/^--use-thread-based-server has no effect/)] });
    expect(() => referenceArgv(['--use-thread-based-server=1'], OURS)).toThrow(UsageError);
  });

  it('turns --llm-server-address ADDR... into one --backend each', () => {
    expect(referenceArgv(['--llm-server-address', 'h:8100', 'h:8101', '--max-run-workers', '4'], OURS).argv).toEqual(['--backend', 'h:8100', '--backend', 'h:8101', '--max-run-workers=4']);
    expect(referenceArgv(['--llm-server-address'], OURS).argv).toEqual([]);
  });

  it('reads --flag=value and unique prefixes of the reference flags, ours winning over a prefix', () => {
    expect(referenceArgv(['--max-init=3', '--max-run', '5', '--time', '60'], OURS).argv).toEqual(['--max-init-workers=3', '--max-run-workers=5', '--timeout=60']);
    // `--max` is ambiguous (three workers flags): left for the command to refuse.
    expect(referenceArgv(['--max', '3'], OURS).argv).toEqual(['--max', '3']);
    expect(referenceArgv(['--token', 's'], OURS).argv).toEqual(['--token', 's']);
  });

  it('leaves our own flags and everything after -- as they are, and notes each flag once', () => {
    const r = referenceArgv(['--backend', 'oracle', '--reward-server-ip', '--reward-server-ip', 'x', '--', '--use-thread-based-server'], OURS);
    expect(r.argv).toEqual(['--backend', 'oracle', '--', '--use-thread-based-server']);
    expect(r.notes).toHaveLength(1);
  });
});
