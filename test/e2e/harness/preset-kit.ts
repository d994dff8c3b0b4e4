import { spawn } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { expect } from 'vitest';
import { defaultHarnessStoreDir, HARNESS_PRESETS, HarnessStore, type PresetName } from '../../../src/handlers/tasks/harness-presets/index.js';
import type { RolloutResult } from '../../../src/protocol/trajectory.js';

const ROLLOUT = join(import.meta.dirname, '../../../bin/rollout.js');

/** The store the tests install into and run from: ROLLOUT_HARNESS_DIR, else the machine's (a cache kept across runs, as `.ci/run` keeps it). */
export const store = new HarnessStore(defaultHarnessStoreDir());

/**
 * Installs `preset` at its default version with `rollout harness install` (from the npm
 * registry; a no-op once it is in the store). Returns the version.
 */
export async function install(preset: PresetName): Promise<string> {
  const version = HARNESS_PRESETS[preset].defaultVersion;
  if (store.installed(preset, version)) return version;
  const out = await new Promise<{ code: number | null; text: string }>((resolve, reject) => {
    const child = spawn(process.execPath, [ROLLOUT, 'harness', 'install', `${preset}@${version}`, '--harness-dir', store.dir], { stdio: ['ignore', 'pipe', 'pipe'] });
    let text = '';
    child.stdout.on('data', (d: Buffer) => (text += d.toString()));
    child.stderr.on('data', (d: Buffer) => (text += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, text }));
  });
  if (out.code !== 0) throw new Error(`rollout harness install ${preset}@${version} failed (${out.code}):\n${out.text}`);
  return version;
}

/** Host pids of processes started from `preset`'s directory of the store as the sandbox sees it (its CLI and children). */
export async function presetProcesses(preset: PresetName): Promise<number[]> {
  const out: number[] = [];
  const tag = `/run/rollout/harness/${preset}/`;
  for (const p of await readdir('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    const cmd = await readFile(`/proc/${p}/cmdline`, 'utf8').catch(() => '');
    if (cmd.includes(tag)) out.push(Number(p));
  }
  return out;
}

/**
 * Every sampled token is in the trajectory where the mask is 1, with its logprob, in order, in
 * each segment; and every request the CLI made was answered (200s only, one per turn).
 */
export function expectTokenExact(r: RolloutResult): void {
  const t = r.trajectory;
  expect(t.tokens.length).toBe(t.lossMask.length);
  expect(t.logprobs.length).toBe(t.lossMask.length);
  const sampled = t.turns.flatMap((x) => x.outputIds);
  const sampledLp = t.turns.flatMap((x) => x.logprobs);
  expect(sampled.length).toBeGreaterThan(0);
  const masked = t.tokens.filter((_, i) => t.lossMask[i] === 1);
  const maskedLp = t.logprobs.filter((_, i) => t.lossMask[i] === 1);
  expect(masked).toEqual(sampled);
  expect(maskedLp).toEqual(sampledLp);
  // Each turn's prompt is in the record before its output (its own segment's prefix).
  for (const seg of t.segments ?? [{ tokenStart: 0, tokenEnd: t.tokens.length, turnStart: 0, turnEnd: t.turns.length }]) {
    const tokens = t.tokens.slice(seg.tokenStart, seg.tokenEnd);
    for (const turn of t.turns.slice(seg.turnStart, seg.turnEnd)) {
      const at = turn.promptIds.length;
      expect(tokens.slice(0, at)).toEqual(turn.promptIds);
      expect(tokens.slice(at, at + turn.outputIds.length)).toEqual(turn.outputIds);
    }
  }
  expect(r.evalDetails?.proxy_requests, 'every request answered').toEqual({ '200': t.turns.length });
}
