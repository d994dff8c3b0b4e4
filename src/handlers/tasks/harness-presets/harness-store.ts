import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { TaskError, ValidationError } from '../../../errors.js';
import { HARNESS_PRESETS, PRESET_NAMES, type PresetName } from './presets.js';

/**
 * The harness store directory: `ROLLOUT_HARNESS_DIR`, else beside the image store's default:
 * `$XDG_CACHE_HOME/rollout-runtime/harnesses`, else `~/.cache/rollout-runtime/harnesses`. One
 * per machine, shared by every `rollout` command and every rollout.
 */
export function defaultHarnessStoreDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.ROLLOUT_HARNESS_DIR) return path.resolve(env.ROLLOUT_HARNESS_DIR);
  const base = env.XDG_CACHE_HOME ? env.XDG_CACHE_HOME : path.join(os.homedir(), '.cache');
  return path.join(base, 'rollout-runtime', 'harnesses');
}

/** The record written last into an installed version's directory: its presence means the install completed. */
const RECORD = '.rollout-harness.json';
const RecordSchema = z.object({ preset: z.enum(PRESET_NAMES), package: z.string(), version: z.string(), installedAt: z.string() });
/** An installed CLI as `rollout harness ls` shows it. */
export type HarnessRecord = z.infer<typeof RecordSchema> & { dir: string };

/** npm versions we accept in a store path: semver-ish, no path characters. */
const VERSION = /^[0-9A-Za-z][0-9A-Za-z.+-]{0,63}$/;

/**
 * `NAME[@VERSION]` → the preset and the version (the preset's tested default when absent).
 * @throws ValidationError naming the known presets, or the bad version.
 */
export function parseHarnessRef(ref: string): { preset: PresetName; version: string } {
  const at = ref.indexOf('@', 1);
  const name = at < 0 ? ref : ref.slice(0, at);
  const version = at < 0 ? undefined : ref.slice(at + 1);
  if (!(PRESET_NAMES as readonly string[]).includes(name)) {
    throw new ValidationError(`unknown harness '${name.slice(0, 100)}': known ones are ${PRESET_NAMES.join(', ')}`, [{ path: 'name', message: `must be one of ${PRESET_NAMES.join(', ')}` }]);
  }
  const preset = name as PresetName;
  if (version !== undefined && !VERSION.test(version)) throw new ValidationError(`bad version '${version.slice(0, 100)}'`, [{ path: 'version', message: 'must be an npm version (letters, digits, . + -)' }]);
  return { preset, version: version ?? HARNESS_PRESETS[preset].defaultVersion };
}

/**
 * A per-machine store of agent CLIs installed from the npm registry:
 * `<dir>/<preset>/<version>/node_modules/…` plus a record file. Sandboxes see it read-only at
 * /run/rollout/harness (src/sandbox/harness-mount.ts); a rollout never installs anything.
 *
 * Crash safety: a version is installed into `<dir>/tmp/<random>` and renamed into place once npm
 * succeeded and the record is written, so a version directory is always whole. Everything is
 * world-readable: the sandbox's unprivileged uid runs it.
 */
export class HarnessStore {
  /** @param dir the store directory; created on first install. */
  constructor(readonly dir: string = defaultHarnessStoreDir()) {}

  /** The directory of an installed version, or null when it is not installed (or incomplete). */
  installed(preset: PresetName, version: string): string | null {
    const dir = path.join(this.dir, preset, version);
    return fs.existsSync(path.join(dir, RECORD)) ? dir : null;
  }

  /**
   * The installed version's directory.
   * @throws TaskError `HARNESS_NOT_INSTALLED` naming the command that installs it.
   */
  require(preset: PresetName, version: string): string {
    const dir = this.installed(preset, version);
    if (dir) return dir;
    throw new TaskError(`harness ${preset}@${version} is not installed in ${this.dir}: run \`rollout harness install ${preset}@${version}\` (or set ROLLOUT_HARNESS_DIR to the store that has it)`, {
      code: 'HARNESS_NOT_INSTALLED',
      stage: 'init',
      details: { preset, version, store: this.dir, install: `rollout harness install ${preset}@${version}` },
    });
  }

  /**
   * Installs `preset@version` with `npm install` (the npm registry the user's npm is configured
   * for). Already installed: returns at once. `log` receives npm's output.
   * @throws Error with npm's exit code and the tail of its output when npm fails.
   */
  async install(preset: PresetName, version: string, opts: { npm?: string; log?: (chunk: string) => void } = {}): Promise<HarnessRecord> {
    const have = this.installed(preset, version);
    if (have) return this.record(have)!;
    const pkg = HARNESS_PRESETS[preset].package;
    const tmpRoot = path.join(this.dir, 'tmp');
    fs.mkdirSync(tmpRoot, { recursive: true, mode: 0o755 });
    fs.chmodSync(this.dir, 0o755);
    const tmp = path.join(tmpRoot, `${preset}-${randomBytes(6).toString('hex')}`);
    fs.mkdirSync(tmp, { mode: 0o755 });
    try {
      fs.writeFileSync(path.join(tmp, 'package.json'), JSON.stringify({ name: 'rollout-harness', private: true }));
      let tail = '';
      const code = await new Promise<number | null>((resolve, reject) => {
        const child = spawn(opts.npm ?? 'npm', ['install', '--no-audit', '--no-fund', '--no-save', '--omit=dev', '--loglevel=error', `${pkg}@${version}`], { cwd: tmp, stdio: ['ignore', 'pipe', 'pipe'] });
        const take = (d: Buffer): void => {
          const s = d.toString();
          tail = (tail + s).slice(-4000);
          opts.log?.(s);
        };
        child.stdout.on('data', take);
        child.stderr.on('data', take);
        child.on('error', reject);
        child.on('close', resolve);
      });
      if (code !== 0) throw new Error(`npm install ${pkg}@${version} failed (exit ${code}):\n${tail.trim()}`);
      const installedVersion = readInstalledVersion(tmp, pkg);
      const rec = { preset, package: pkg, version: installedVersion ?? version, installedAt: new Date().toISOString() };
      fs.writeFileSync(path.join(tmp, RECORD), JSON.stringify(rec));
      const dest = path.join(this.dir, preset, version);
      fs.mkdirSync(path.dirname(dest), { recursive: true, mode: 0o755 });
      fs.chmodSync(path.dirname(dest), 0o755);
      try {
        fs.renameSync(tmp, dest);
      } catch (err) {
        // Another install of the same version won the race: its copy is as good.
        if (!this.installed(preset, version)) throw err;
      }
      return { ...rec, dir: dest };
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
  }

  /** Every installed version, by preset then version. */
  list(): HarnessRecord[] {
    const out: HarnessRecord[] = [];
    for (const preset of PRESET_NAMES) {
      let versions: string[];
      try {
        versions = fs.readdirSync(path.join(this.dir, preset));
      } catch {
        continue;
      }
      for (const v of versions.sort()) {
        const r = this.record(path.join(this.dir, preset, v));
        if (r) out.push(r);
      }
    }
    return out;
  }

  /** Removes one version, or every version of `preset` when `version` is undefined. Returns what was removed. */
  remove(preset: PresetName, version?: string): HarnessRecord[] {
    const gone = this.list().filter((r) => r.preset === preset && (version === undefined || path.basename(r.dir) === version));
    for (const r of gone) fs.rmSync(r.dir, { recursive: true, force: true });
    return gone;
  }

  private record(dir: string): HarnessRecord | null {
    try {
      const r = RecordSchema.parse(JSON.parse(fs.readFileSync(path.join(dir, RECORD), 'utf8')));
      return { ...r, dir };
    } catch {
      return null;
    }
  }
}

function readInstalledVersion(root: string, pkg: string): string | null {
  try {
    const v = (JSON.parse(fs.readFileSync(path.join(root, 'node_modules', pkg, 'package.json'), 'utf8')) as { version?: unknown }).version;
    return typeof v === 'string' ? v : null;
  } catch {
    return null;
  }
}
