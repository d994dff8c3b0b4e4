import path from 'node:path';
import { HARNESS_NODE_DIR_INSIDE, HARNESS_STORE_INSIDE } from '../../../sandbox/harness-mount.js';
import { HARNESS_PRESETS, type PresetName, type PresetRun } from './presets.js';

/** A shell word: single-quoted, so nothing in it expands. */
export function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/** A preset's env value: a leading `$HOME/` expands (the sandbox's home), the rest is literal. */
function envValue(v: string): string {
  return v.startsWith('$HOME/') ? `"$HOME"/${shellQuote(v.slice(6))}` : shellQuote(v);
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** What one rollout of a preset runs: the preset, its installed version, the instance's extras. */
export interface PresetInvocation {
  preset: PresetName;
  version: string;
  run: PresetRun;
  /** Appended to the preset's arguments. */
  args?: string[] | undefined;
  /** Over the preset's env, literal values. */
  env?: Record<string, string> | undefined;
  /** The directory the CLI starts in (relative to /workspace, or absolute); default /workspace. */
  cwd?: string | undefined;
}

/**
 * The shell script the harness runs for a preset (in a subshell of the sandbox's shell, in
 * /workspace): put the store's Node first on PATH, write the CLI's config files under `$HOME`
 * (base64, so no content needs quoting), export its env, then run the CLI from the read-only
 * store with stdin from /dev/null and its output through a pipe (not a terminal: no TUI, no
 * prompt), exiting with the CLI's own exit code.
 * @throws Error when an env name is not a shell variable name (the schema refuses those first).
 */
export function presetCommand(inv: PresetInvocation): string {
  const p = HARNESS_PRESETS[inv.preset];
  const lines = [`export PATH=${HARNESS_NODE_DIR_INSIDE}:"$PATH"`];
  // A sandbox's processes have an address-space limit (SandboxLimits.memoryBytes: 4 GiB by
  // default, 16 GiB with the store: harness-mount.ts), and V8 reserves ~10 GiB per Wasm memory
  // for its guard regions; Node's fetch parses HTTP in Wasm (undici's llhttp). Under 4 GiB every
  // request of a Node CLI failed with "fetch failed" (Cannot allocate Wasm memory), and 16 GiB
  // would hold one such memory only. Explicit bounds checks need no reservation.
  if (process.allowedNodeEnvironmentFlags.has('--disable-wasm-trap-handler')) lines.push('export NODE_OPTIONS="--disable-wasm-trap-handler${NODE_OPTIONS:+ $NODE_OPTIONS}"');
  for (const [rel, content] of Object.entries(p.files(inv.run))) {
    const dir = path.posix.dirname(rel);
    const target = `"$HOME"/${shellQuote(rel)}`;
    lines.push(`mkdir -p "$HOME"/${shellQuote(dir)} && printf %s ${shellQuote(Buffer.from(content).toString('base64'))} | base64 -d > ${target} || exit 97`);
  }
  for (const [k, v] of Object.entries(p.env(inv.run))) lines.push(`export ${k}=${envValue(v)}`);
  for (const [k, v] of Object.entries(inv.env ?? {})) {
    if (!ENV_NAME.test(k)) throw new Error(`env: '${k}' is not a variable name`);
    lines.push(`export ${k}=${shellQuote(v)}`);
  }
  const bin = `${HARNESS_STORE_INSIDE}/${inv.preset}/${inv.version}/node_modules/.bin/${p.bin}`;
  const argv = [bin, ...p.argv(inv.run), ...(inv.args ?? [])].map(shellQuote).join(' ');
  if (inv.cwd !== undefined) lines.push(`cd ${shellQuote(inv.cwd)} || { echo "harness: cannot enter cwd ${inv.cwd.replace(/["$`\\]/g, '')}"; exit 96; }`);
  lines.push('set -o pipefail', `${argv} </dev/null 2>&1 | cat`);
  return lines.join('\n');
}
