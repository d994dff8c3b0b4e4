import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as pty from '@lydell/node-pty';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startFakeLlmProcess, type ServerProcess } from '../../helpers/server-process.js';

/**
 * `rollout run` in a real pseudo-terminal (#16.2): the bar is redrawn in place on a TTY, the first
 * Ctrl-C (SIGINT) cancels what is live and still writes the summary with the cancelled count and
 * pass@k over finished rollouts only, and a second one exits at once. A slow fake engine keeps
 * rollouts in flight long enough to interrupt.
 */

const repo = fileURLToPath(new URL('../../../', import.meta.url));
const bin = join(repo, 'bin', 'rollout.js');
const stem = join(repo, 'examples', 'stem.jsonl');
const dir = mkdtempSync(join(tmpdir(), 'rr-run-int-'));
let fake: ServerProcess | undefined;
let url = '';

// A fresh engine per test: the first test's cancelled calls would otherwise still be queued at
// this engine (two slots, 1.5 s each) when the second run's pre-flight probes it.
beforeEach(async () => {
  fake = await startFakeLlmProcess(['--tasks', stem, '--latency-ms', '1500', '--max-concurrent', '2']);
  url = fake.url;
}, 60_000);

afterEach(async () => {
  await fake?.stop();
});

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** `rollout run` on a pty; `interrupt(output)` decides when to send SIGINT (and how many). */
function runOnPty(out: string, onData: (all: string, term: pty.IPty) => void): Promise<{ code: number; signal: number | undefined; output: string }> {
  const term = pty.spawn(process.execPath, [bin, 'run', stem, '--n', '4', '--backend', url, '--sandbox', 'none', '--out', join(dir, out)], {
    cols: 200,
    rows: 40,
    cwd: dir,
    env: { ...process.env, FORCE_COLOR: '0' } as Record<string, string>,
  });
  let output = '';
  term.onData((d) => {
    output += d;
    onData(output, term);
  });
  return new Promise((res) => term.onExit(({ exitCode, signal }) => res({ code: exitCode, signal, output })));
}

describe('rollout run on a terminal', { timeout: 180_000 }, () => {
  it('redraws its bar in place, and on the first Ctrl-C cancels the live rollouts, writes the summary and exits 130', async () => {
    let sent = false;
    const r = await runOnPty('once', (all, term) => {
      // Interrupt once a few rollouts have finished and others are still at the engine.
      if (!sent && / [2-9]\/24 /.test(all)) {
        sent = true;
        term.kill('SIGINT');
      }
    });
    expect(sent).toBe(true);
    expect(r.code).toBe(130);
    // In place: carriage returns / cursor moves redraw one line; no plain periodic `rollout run: N/24` lines.
    expect(r.output.includes('\r') || r.output.includes('\u001b[')).toBe(true);
    expect(r.output).not.toMatch(/rollout run: \d+\/24 ·/);
    expect(r.output).toMatch(/rollouts\/s · \d+ tok\/s/);
    expect(r.output).toContain('interrupted; cancelling live rollouts (Ctrl-C again to exit at once)');
    const summary = JSON.parse(readFileSync(join(dir, 'once', 'summary.json'), 'utf8')) as { rollouts: number; cancelled: number; resolved: number; passAt1: number };
    expect(summary.cancelled).toBeGreaterThan(0);
    expect(r.output).toMatch(new RegExp(`cancelled\\s+${summary.cancelled} \\(not finished: left out of pass@k, rates and timings\\)`));
    // Tasks are counted against the file, and the progress line is drawn for the last time
    // before the interrupt message: nothing redraws it over the message or the summary (#30).
    expect(r.output).toMatch(/rollouts\s+\d+ finished \(\d+ tasks of 6 in the file × n=4\), \d+ cancelled/);
    expect(r.output.slice(r.output.indexOf('interrupted; cancelling')).match(/rollouts\/s · \d+ tok\/s/)).toBeNull();
    expect(r.output).toMatch(/\(interrupted: \d+ live rollouts were cancelled, \d+ never started\)/);
    // pass@1 over finished rollouts only: the cancelled ones are not counted as failures.
    const finished = summary.rollouts - summary.cancelled;
    expect(finished).toBeGreaterThan(0);
    expect(summary.passAt1).toBeGreaterThan(0);
    expect(r.output).not.toContain('Summarys');
  });

  it('exits at once on a second Ctrl-C', async () => {
    // Cancelling can finish the run before the second signal reaches it (tens of ms here). Then
    // the run has exited 130 on its own, or the late signal ended it as it exited: both are
    // right, but do not show the second Ctrl-C. So up to three tries, one of which must.
    let exercised = false;
    for (let i = 0; i < 3 && !exercised; i++) {
      if (i > 0) {
        await fake?.stop();
        fake = await startFakeLlmProcess(['--tasks', stem, '--latency-ms', '1500', '--max-concurrent', '2']);
        url = fake.url;
      }
      let sent = 0;
      const r = await runOnPty(`twice-${i}`, (all, term) => {
        if (sent === 0 && /rollouts\/s/.test(all)) {
          sent = 1;
          term.kill('SIGINT');
        } else if (sent === 1 && all.includes('interrupted; cancelling')) {
          sent = 2;
          term.kill('SIGINT');
        }
      });
      expect(sent, r.output.slice(-2000)).toBe(2);
      if (r.output.includes('interrupted twice; exiting without waiting')) {
        expect(r.code).toBe(130);
        exercised = true;
      } else {
        expect(r.output, r.output.slice(-2000)).toMatch(/\(interrupted: \d+ live rollouts were cancelled/);
        expect(r.code === 130 || r.signal === 2, JSON.stringify([r.code, r.signal])).toBe(true);
      }
    }
    expect(exercised).toBe(true);
  });
});
