import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

// Issue #28 §1: the one helper every test that needs a system tool decides through, and the
// script CI uses to prove those tests skip (not fail) without the tools.

type Helper = typeof import('../../helpers/system-tools.js');
const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, '../../..');

describe('test/helpers/system-tools.ts', () => {
  let bin: string;
  const saved = { ...process.env };
  let stderr: string[];

  /** A fresh copy of the helper (it probes once per process) with PATH = only `bin`. */
  async function helper(env: Record<string, string> = {}): Promise<Helper> {
    vi.resetModules();
    process.env['PATH'] = bin;
    for (const k of Object.keys(process.env)) if (k.startsWith('ROLLOUT_REQUIRE_')) delete process.env[k];
    Object.assign(process.env, env);
    return import('../../helpers/system-tools.js');
  }

  beforeEach(() => {
    bin = fs.mkdtempSync(path.join(os.tmpdir(), 'tools-bin-'));
    stderr = [];
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
      stderr.push(String(chunk));
      return true;
    });
  });
  afterEach(() => {
    vi.restoreAllMocks();
    process.env = { ...saved };
    fs.rmSync(bin, { recursive: true, force: true });
  });

  it('skips a missing tool with one line naming the package to install, printed once', async () => {
    const h = await helper();
    expect(h.missingTools('zstd', 'umoci')).toBe('needs zstd, umoci (apt-get install zstd umoci)');
    expect(h.haveTools('zstd', 'umoci')).toBe(false);
    expect(stderr).toEqual(['skipping: needs zstd, umoci (apt-get install zstd umoci)\n']);
  });

  it('finds a tool that is an executable on PATH', async () => {
    fs.writeFileSync(path.join(bin, 'zstd'), '#!/bin/sh\n', { mode: 0o755 });
    fs.writeFileSync(path.join(bin, 'umoci'), 'not executable', { mode: 0o644 });
    const h = await helper();
    expect(h.missingTools('zstd')).toBeNull();
    expect(h.missingTools('umoci')).toMatch(/apt-get install umoci/);
  });

  it('fails instead under ROLLOUT_REQUIRE_TOOLS=1 or the tool\'s own variable, as CI sets them', async () => {
    await expect((async () => (await helper({ ROLLOUT_REQUIRE_TOOLS: '1' })).missingTools('zstd'))()).rejects.toThrow(/ROLLOUT_REQUIRE_ZSTD.*needs zstd \(apt-get install zstd\)/);
    await expect((async () => (await helper({ ROLLOUT_REQUIRE_REDIS_SERVER: '1' })).haveTools('redis-server'))()).rejects.toThrow(/ROLLOUT_REQUIRE_REDIS_SERVER/);
    // Another tool's variable does not make this one required.
    expect((await helper({ ROLLOUT_REQUIRE_CHROMIUM: '1' })).missingTools('zstd')).toMatch(/apt-get install zstd/);
  });

  it('lets a test fall back quietly when a tool is absent (bwrap → unshare), unless it is required', async () => {
    const h = await helper();
    expect(h.toolPresent('zstd')).toBe(false);
    expect(stderr).toEqual([]);
    await expect((async () => (await helper({ ROLLOUT_REQUIRE_ZSTD: '1' })).toolPresent('zstd'))()).rejects.toThrow(/ROLLOUT_REQUIRE_ZSTD/);
  });
});

describe.runIf(process.getuid?.() === 0)('scripts/hide-tools.sh (needs root: a private mount namespace)', () => {
  it('hides every tool the helper lists from the command it runs, unsets ROLLOUT_REQUIRE_*, and leaves the machine as it was', { timeout: 60_000 }, async () => {
    const { onPath } = await import('../../helpers/system-tools.js');
    const before = ['slirp4netns', 'zstd', 'setfattr', 'bwrap'].map((t) => onPath(t));
    // Its own TMPDIR: another run of the script on the machine (a second suite) cannot show here.
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'rollout-hide-tools-test-'));
    try {
      const probe = 'for t in slirp4netns zstd setfattr bwrap sh; do command -v $t >/dev/null && echo "$t here" || echo "$t absent"; done; echo "require=${ROLLOUT_REQUIRE_TOOLS-unset}"; ls "$TMPDIR"';
      const { stdout } = await run(path.join(root, 'scripts/hide-tools.sh'), ['sh', '-c', probe], { env: { ...process.env, ROLLOUT_REQUIRE_TOOLS: '1', TMPDIR: tmp } });
      const lines = stdout.trim().split('\n');
      expect(lines.slice(0, 6)).toEqual(['slirp4netns absent', 'zstd absent', 'setfattr absent', 'bwrap absent', 'sh here', 'require=unset']);
      // The scratch mount point existed while the command ran, and is gone after it.
      // (tsx, which the script runs, keeps its cache there too.)
      const scratch = (names: string[]): string[] => names.filter((f) => f.startsWith('rollout-hide-tools.'));
      expect(scratch(lines.slice(6))).toEqual([expect.stringMatching(/^rollout-hide-tools\.\w{6}$/)]);
      expect(['slirp4netns', 'zstd', 'setfattr', 'bwrap'].map((t) => onPath(t))).toEqual(before);
      expect(scratch(fs.readdirSync(tmp))).toEqual([]);
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
  });

  it('passes the command\'s exit status through', { timeout: 60_000 }, async () => {
    await expect(run(path.join(root, 'scripts/hide-tools.sh'), ['sh', '-c', 'exit 7'])).rejects.toMatchObject({ code: 7 });
  });
});
