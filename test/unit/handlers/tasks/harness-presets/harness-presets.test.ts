import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { TaskError, ValidationError } from '../../../../../src/errors.js';
import { HARNESS_PRESETS, HarnessStore, parseHarnessRef, PRESET_NAMES, presetCommand, defaultHarnessStoreDir } from '../../../../../src/handlers/tasks/harness-presets/index.js';
import { HarnessInstanceSchema } from '../../../../../src/handlers/tasks/harness.js';
import { validateSubmission } from '../../../../../src/runtime/submission.js';
import { harnessLimits } from '../../../../../src/sandbox/harness-mount.js';

const run = { baseUrl: 'http://127.0.0.1:18400/v1', origin: 'http://127.0.0.1:18400', apiKey: 'rk-abc', model: 'policy', instruction: 'fix it' };
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});
function tempStore(): HarnessStore {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'harness-store-'));
  dirs.push(d);
  return new HarnessStore(d);
}
/** Marks `preset@version` installed the way install does last (the record file). */
function fakeInstall(store: HarnessStore, preset: (typeof PRESET_NAMES)[number], version: string): void {
  const dir = path.join(store.dir, preset, version);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, '.rollout-harness.json'), JSON.stringify({ preset, package: HARNESS_PRESETS[preset].package, version, installedAt: '2026-12-01T00:00:00Z' }));
}

describe('harness presets', () => {
  it('refuses an unknown preset at submit with a ValidationError naming the known ones', () => {
    const err = (() => {
      try {
        validateSubmission({ data_source: 'harness', preset: 'cursor', instruction: 'x', eval_command: 'true' }, {});
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).issues).toEqual([{ path: 'instance.preset', message: `unknown preset: known ones are ${PRESET_NAMES.join(', ')}` }]);
    expect(PRESET_NAMES).toEqual(['codex', 'claude-code', 'qwen-code', 'pi', 'gemini-cli', 'opencode']);
  });

  it('the instance needs exactly one of command and preset, and a preset needs an instruction', () => {
    const issues = (v: object): string[] => {
      const r = HarnessInstanceSchema.safeParse({ eval_command: 'true', ...v });
      return r.success ? [] : r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
    };
    expect(issues({ preset: 'pi', instruction: 'go' })).toEqual([]);
    expect(issues({ command: 'x', preset: 'pi', instruction: 'go' })).toEqual(['command: give exactly one of command and preset']);
    expect(issues({})).toEqual(['command: give exactly one of command and preset']);
    expect(issues({ preset: 'pi' })).toEqual(['instruction: required with a preset']);
    expect(issues({ command: 'x', args: ['-v'] })).toEqual(['args: only with a preset']);
    expect(issues({ preset: 'pi', instruction: 'go', env: { 'A B': '1' } })).toEqual(['env.A B: Invalid key in record']);
    expect(issues({ preset: 'pi', instruction: 'go', version: '../../etc' })).toEqual(['version: must be an npm version (letters, digits, . + -)']);
  });

  it('parses NAME[@VERSION], defaulting to the tested version, and refuses unknown names listing the known', () => {
    expect(parseHarnessRef('codex')).toEqual({ preset: 'codex', version: HARNESS_PRESETS.codex.defaultVersion });
    expect(parseHarnessRef('pi@0.70.0')).toEqual({ preset: 'pi', version: '0.70.0' });
    expect(() => parseHarnessRef('aider')).toThrow(/unknown harness 'aider': known ones are codex, claude-code, qwen-code, pi, gemini-cli, opencode/);
    expect(() => parseHarnessRef('pi@1/2')).toThrow(ValidationError);
  });

  it('names the install command when a preset is not installed, and lists and removes installed versions', () => {
    const store = tempStore();
    let err: unknown;
    try {
      store.require('claude-code', '2.1.328');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TaskError);
    expect((err as TaskError).code).toBe('HARNESS_NOT_INSTALLED');
    expect((err as TaskError).message).toMatch(/run `rollout harness install claude-code@2\.1\.328`/);
    // A directory without its record is an unfinished install: not installed.
    fs.mkdirSync(path.join(store.dir, 'pi', '0.1.0'), { recursive: true });
    fakeInstall(store, 'pi', '0.73.1');
    fakeInstall(store, 'pi', '0.72.0');
    fakeInstall(store, 'codex', '0.169.0');
    expect(store.list().map((r) => `${r.preset}@${r.version}`)).toEqual(['codex@0.169.0', 'pi@0.72.0', 'pi@0.73.1']);
    expect(store.require('pi', '0.73.1')).toBe(path.join(store.dir, 'pi', '0.73.1'));
    expect(store.remove('pi', '0.72.0').map((r) => r.version)).toEqual(['0.72.0']);
    expect(store.remove('pi').map((r) => r.version)).toEqual(['0.73.1']);
    expect(store.list().map((r) => r.preset)).toEqual(['codex']);
  });

  it('raises only the address-space limit of a sandbox with the store, and never lowers it', () => {
    const limits = { memoryBytes: 4 * 1024 ** 3, fileSizeBytes: 1, cpuSeconds: 2, maxProcesses: 3, tmpBytes: 4, totalMemoryBytes: 5, workdirBytes: 6 };
    expect(harnessLimits(limits)).toEqual({ ...limits, memoryBytes: 16 * 1024 ** 3 });
    expect(harnessLimits({ ...limits, memoryBytes: 64 * 1024 ** 3 }).memoryBytes).toBe(64 * 1024 ** 3);
  });

  it('defaults the store beside the image store, or to ROLLOUT_HARNESS_DIR', () => {
    expect(defaultHarnessStoreDir({ XDG_CACHE_HOME: '/c' })).toBe('/c/rollout-runtime/harnesses');
    expect(defaultHarnessStoreDir({ ROLLOUT_HARNESS_DIR: '/s/h', XDG_CACHE_HOME: '/c' })).toBe('/s/h');
  });

  it('starts the CLI in the instance\'s cwd (Polar\'s runtime.workdir), and fails clearly when it is missing', () => {
    const home = fs.mkdtempSync(path.join(os.tmpdir(), 'preset-home-'));
    dirs.push(home);
    fs.mkdirSync(path.join(home, 'repo', 'sub'), { recursive: true });
    const cli = (cwd: string): string => presetCommand({ preset: 'codex', version: '1.0.0', run, cwd }).replace(/^'\/run\/rollout\/harness\/[^']+'.*$/m, 'pwd');
    const ok = spawnSync('bash', ['-c', cli('repo/sub')], { cwd: home, env: { PATH: process.env.PATH, HOME: home }, encoding: 'utf8' });
    expect(ok.status, ok.stderr).toBe(0);
    expect(ok.stdout.trim()).toBe(fs.realpathSync(path.join(home, 'repo', 'sub')));
    const missing = spawnSync('bash', ['-c', cli('nope')], { cwd: home, env: { PATH: process.env.PATH, HOME: home }, encoding: 'utf8' });
    expect(missing.status).toBe(96);
    expect(missing.stdout).toContain('harness: cannot enter cwd nope');
  });

  it('writes each CLI its config pointing at the proxy, and passes the instruction as one literal argument', () => {
    const home = fs.mkdtempSync(path.join(os.tmpdir(), 'preset-home-'));
    dirs.push(home);
    const instruction = `it's "$(touch pwned)" \`id\` $HOME\nline two`;
    for (const preset of PRESET_NAMES) {
      // The script up to the CLI, with `printf` standing in for it: what it writes, exports and passes.
      const script = presetCommand({ preset, version: '1.0.0', run: { ...run, instruction }, args: ['--extra'], env: { EXTRA_VAR: 'a b' } }).replace(
        /^'\/run\/rollout\/harness\/[^']+'/m,
        'printf "<%s>\\n"',
      );
      const r = spawnSync('bash', ['-c', script], { cwd: home, env: { PATH: process.env.PATH, HOME: home }, encoding: 'utf8' });
      expect(r.status, r.stderr).toBe(0);
      const args = [...r.stdout.matchAll(/<([^>]*)>/g)].map((m) => m[1]);
      expect(args, preset).toContain(instruction);
      expect(args.at(-1)).toBe('--extra');
      expect(fs.existsSync(path.join(home, 'pwned'))).toBe(false);
      for (const [rel, content] of Object.entries(HARNESS_PRESETS[preset].files({ ...run, instruction }))) {
        expect(fs.readFileSync(path.join(home, rel), 'utf8'), `${preset} ${rel}`).toBe(content);
      }
    }
    expect(fs.readFileSync(path.join(home, '.codex/config.toml'), 'utf8')).toMatch(/base_url = "http:\/\/127\.0\.0\.1:18400\/v1"\nenv_key = "OPENAI_API_KEY"\nwire_api = "responses"/);
    expect(JSON.parse(fs.readFileSync(path.join(home, '.pi/agent/models.json'), 'utf8')).providers.rollout.baseUrl).toBe(run.baseUrl);
    expect(JSON.parse(fs.readFileSync(path.join(home, '.config/opencode/opencode.json'), 'utf8')).provider.rollout.options.baseURL).toBe(run.baseUrl);
    expect(JSON.parse(fs.readFileSync(path.join(home, '.qwen/settings.json'), 'utf8')).telemetry.enabled).toBe(false);
    expect(HARNESS_PRESETS['claude-code'].env(run)).toMatchObject({ ANTHROPIC_BASE_URL: run.origin, ANTHROPIC_API_KEY: run.apiKey, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1' });
    expect(HARNESS_PRESETS['gemini-cli'].env(run)).toMatchObject({ GOOGLE_GEMINI_BASE_URL: run.origin, GEMINI_API_KEY: run.apiKey });
  });
});
