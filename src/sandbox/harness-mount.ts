import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { SandboxError, TaskError } from '../errors.js';
import type { SandboxLimits } from '../protocol/sandbox.js';
import { isRoot } from './sandbox-user.js';

/**
 * The address-space limit (RLIMIT_AS) of a sandbox running an agent CLI from the store, at least.
 * The engines inside reserve far more virtual memory than they use: OpenCode's and Claude Code's
 * compiled Bun binaries start at ~3.3 GB of address space, and OpenCode died with JSC's
 * "MemoryExhaustion" under the default 4 GiB after its first tool call (measured here). Real
 * memory stays bounded by the sandbox's memory cgroup (`totalMemoryBytes`) where there is one.
 */
export const HARNESS_ADDRESS_SPACE_BYTES = 16 * 1024 ** 3;

/** `limits` for a sandbox with the harness store: the address space raised to {@link HARNESS_ADDRESS_SPACE_BYTES}. */
export function harnessLimits(limits: SandboxLimits): SandboxLimits {
  return { ...limits, memoryBytes: Math.max(limits.memoryBytes, HARNESS_ADDRESS_SPACE_BYTES) };
}

/** Where a sandbox sees the harness store (read-only): `<store>/<preset>/<version>/node_modules/…`. */
export const HARNESS_STORE_INSIDE = '/run/rollout/harness';
/** A directory inside the sandbox holding only `node`: the runtime's own Node binary, read-only. */
export const HARNESS_NODE_DIR_INSIDE = '/run/rollout/harness-node';

/**
 * Makes the harness store and a Node runtime visible in a sandbox under its control dir (shown
 * as /run/rollout): `harness/` ← `storeDir`, `harness-node/node` ← this process's Node binary.
 * Both read-only. Image sandboxes have no Node of their own, and the host's home (where the
 * store lives by default) is hidden in host-root ones: a bind is the one way for both.
 *
 * As root the host mounts them into the control dir itself (the sandbox's unprivileged uid
 * could not reach a store under a 0700 home), and the driver's bind of the control dir carries
 * them; the sandbox dir's removal detaches them (remove-tree.ts). Otherwise the mount points are
 * made and the returned pairs are for the driver to bind (`--ro-bind src dest`).
 * @throws TaskError `BAD_SPEC` when `storeDir` is not a directory; SandboxError when a mount fails.
 */
export function mountHarnessStore(storeDir: string, ctlDir: string): Array<[string, string]> {
  let st: fs.Stats;
  try {
    st = fs.statSync(storeDir);
  } catch {
    throw new TaskError(`harnessStore: no such directory: ${storeDir}`, { code: 'BAD_SPEC', stage: 'init' });
  }
  if (!st.isDirectory()) throw new TaskError(`harnessStore: not a directory: ${storeDir}`, { code: 'BAD_SPEC', stage: 'init' });
  const storeTarget = path.join(ctlDir, 'harness');
  const nodeDir = path.join(ctlDir, 'harness-node');
  const nodeTarget = path.join(nodeDir, 'node');
  fs.mkdirSync(storeTarget, { mode: 0o755 });
  fs.mkdirSync(nodeDir, { mode: 0o755 });
  fs.writeFileSync(nodeTarget, '', { mode: 0o755 });
  const node = fs.realpathSync(process.execPath);
  if (!isRoot()) return [[storeDir, `${HARNESS_STORE_INSIDE}`], [node, `${HARNESS_NODE_DIR_INSIDE}/node`]];
  for (const [src, target] of [[storeDir, storeTarget], [node, nodeTarget]] as const) {
    const r = spawnSync('mount', ['--bind', '-o', 'ro', src, target], { encoding: 'utf8' });
    if (r.status !== 0) throw new SandboxError(`cannot bind the harness store: ${(r.stderr || r.error?.message || '').trim()}`, { code: 'SANDBOX_HARNESS_STORE', stage: 'init' });
  }
  return [];
}
