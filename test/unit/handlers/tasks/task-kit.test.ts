import { describe, expect, it } from 'vitest';
import { answerTexts, runToEnd } from '../../../../src/handlers/tasks/task-kit.js';
import { ManualClock } from '../../../../src/clock.js';
import { HINT_TIMEOUT } from '../../../../src/sandbox/output.js';
import type { BashRequest, BashResult, Sandbox } from '../../../../src/sandbox/sandbox.js';

/** A sandbox whose bash answers from a script; only `bash` is used by runToEnd. */
function scriptedBash(answers: Partial<BashResult>[]): { sandbox: Sandbox; requests: BashRequest[] } {
  const requests: BashRequest[] = [];
  const sandbox = {
    bash: async (req: BashRequest) => {
      requests.push(req);
      return { output: '', exitCode: null, cwd: '/workspace', timedOut: true, truncated: false, ...answers.shift() };
    },
  } as unknown as Sandbox;
  return { sandbox, requests };
}

describe('runToEnd', () => {
  it('keeps waiting past the no-output timeout until the command exits', async () => {
    const { sandbox, requests } = scriptedBash([{ output: 'a' }, { output: 'b' }, { output: 'c', exitCode: 0, timedOut: false }]);
    const r = await runToEnd(sandbox, 'make test', 60_000, new AbortController().signal, new ManualClock());
    expect([r.output, r.exitCode, requests.map((q) => q.command)]).toEqual(['abc', 0, ['make test', '', '']]);
  });
  it('joins the pieces without the shell\'s notes to a model, so a line printed across two waits stays one line', async () => {
    const { sandbox } = scriptedBash([{ output: `{"passed": ${HINT_TIMEOUT}` }, { output: `3}\n`, exitCode: 0, timedOut: false }]);
    const r = await runToEnd(sandbox, 'python3 .eval/run.py', 60_000, new AbortController().signal, new ManualClock());
    expect(JSON.parse(r.output)).toEqual({ passed: 3 });
  });
  it('interrupts the command once the deadline has passed', async () => {
    const { sandbox, requests } = scriptedBash([{ output: 'x' }, { output: '' }]);
    const r = await runToEnd(sandbox, 'sleep 99', 0, new AbortController().signal, new ManualClock());
    expect([r.timedOut, requests.at(-1)]).toEqual([true, { command: 'C-c', isInput: true, timeoutMs: 5000 }]);
  });
});

describe('answerTexts', () => {
  it('puts the last finish message first, then assistant texts from the last', () => {
    const texts = answerTexts([
      { role: 'assistant', content: 'one' },
      { role: 'assistant', content: 'two', tool_calls: [{ name: 'finish', arguments: { message: 'final' } }] },
    ]);
    expect(texts).toEqual(['final', 'two', 'one']);
  });
});
