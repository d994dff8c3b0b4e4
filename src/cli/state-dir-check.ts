import fs from 'node:fs';
import path from 'node:path';
import { grantSearch } from '../sandbox/sandbox-fs.js';
import { parseSandboxOptions, type SandboxOptionsInput } from '../sandbox/sandbox-options.js';
import { isRoot } from '../sandbox/sandbox-user.js';

/**
 * The start-up check of `rollout worker`, `serve` and `run` (issue #28 §4): can the sandbox's
 * unprivileged uid pass every directory on the way to the state dir? Without it, every sandbox
 * fails with `STATE_DIR_UNREACHABLE` — and a worker under a `mktemp -d` (mode 0700) took jobs and
 * failed each one three times. It makes the state dir as the provider would (0700) and runs the
 * very check sandbox creation runs (`grantSearch` of sandbox-fs.ts, which also gives the state dir
 * itself o+x). Only as root: otherwise sandboxes run as this process's own uid.
 * @throws SandboxError `STATE_DIR_UNREACHABLE` naming the directory (the CLI exits 2 with it);
 *   ValidationError on bad sandbox options.
 */
export function checkStateDir(input: SandboxOptionsInput = {}): void {
  if (!isRoot()) return;
  const { stateDir } = parseSandboxOptions(input);
  fs.mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  grantSearch(stateDir, path.join(stateDir, 'sandboxes'));
}
