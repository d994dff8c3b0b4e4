import fs from 'node:fs';
import { spawn } from 'node:child_process';
import { TaskError } from '../errors.js';
import type { SandboxCreate } from '../protocol/sandbox.js';
import type { PidsCgroup } from './cgroup.js';
import { TRUSTED_PATH } from './drivers.js';
import { imageEnv } from './images/image-root.js';
import { writeLease, type Lease } from './lease.js';
import { processStartTime } from './proc.js';
import type { HostOwner } from './host-fork.js';
import { writeWorkspaceFile } from './workspace-fs.js';
import { WORKSPACE, checkFileKeys, fileKeysError } from './workspace-path.js';

/**
 * What a host sandbox (host-sandbox.ts) is made from, as functions of its request: its lease, the
 * seeding of its workspace, and the environment and PATH its processes get.
 */

/** The sandbox's PATH unless its image or task names another. */
const BASE_PATH = TRUSTED_PATH;

/** A new sandbox's lease, written to its file before anything of it runs (stale cleanup finds it by this). */
export function leaseFor(req: SandboxCreate, owner: HostOwner, at: { dir: string; workdir: string; cgroup: PidsCgroup | null }): Lease {
  const lease: Lease = {
    sandboxId: req.sandboxId,
    runtimeId: owner.runtimeId,
    ownerPid: owner.ownerPid,
    ownerStart: owner.ownerStart,
    rolloutId: req.rolloutId,
    hostPid: process.pid,
    hostStart: processStartTime(process.pid),
    ptyPid: null,
    ptyStart: null,
    cgroup: at.cgroup?.dir ?? null,
    dir: at.dir,
    workdir: at.workdir,
    createdAt: new Date().toISOString(),
  };
  writeLease(lease);
  return lease;
}

/**
 * The environment a launch or REPL entry is spawned with: the sandbox's, but with PATH the
 * trusted one for every driver that contains (the sandbox's own PATH goes in the plan and is
 * applied at the last step: drivers.ts, `LaunchPlan.sandboxPath`). `proxyUrl`: the sandbox's
 * `OPENAI_BASE_URL` when its spec has an LLM proxy.
 */
export function launchEnv(req: SandboxCreate, home: string, proxyUrl: string | undefined): Record<string, string> {
  const env = sandboxEnv(req, home, proxyUrl);
  return req.driver === 'none' ? env : { ...env, PATH: TRUSTED_PATH };
}

/** The PATH the sandbox's own processes see: the task's, else the image's, else ours. */
export function sandboxPath(req: SandboxCreate): string {
  return req.spec.env?.PATH ?? imageEnv(req.image).PATH ?? BASE_PATH;
}

/** What the sandbox's own processes see (the image's Env, then the task's env, over ours). */
function sandboxEnv(req: SandboxCreate, home: string, proxyUrl: string | undefined): Record<string, string> {
  return {
    HOME: home,
    TERM: 'dumb',
    LANG: 'C.UTF-8',
    LC_ALL: 'C.UTF-8',
    PAGER: 'cat',
    GIT_PAGER: 'cat',
    PYTHONUNBUFFERED: '1',
    PYTHONDONTWRITEBYTECODE: '1',
    ...imageEnv(req.image),
    ...(req.spec.env ?? {}),
    PATH: sandboxPath(req),
    // Last: the task's env cannot point the harness elsewhere.
    ...(req.spec.llmProxy ? { OPENAI_BASE_URL: proxyUrl!, OPENAI_API_KEY: req.spec.llmProxy.token } : {}),
  };
}

/** Seeds a new sandbox's workspace from its spec (`gitRepo`, `seedDir`, `files`), as root, before anything of it runs. */
export async function seed(workdir: string, req: SandboxCreate): Promise<void> {
  const spec = req.spec;
  if (spec.gitRepo) {
    await new Promise<void>((resolve, reject) => {
      const git = spawn('git', ['clone', '--quiet', '--no-hardlinks', '--', spec.gitRepo!, workdir], {
        stdio: ['ignore', 'ignore', 'pipe'],
        env: { ...process.env, GIT_TERMINAL_PROMPT: '0' },
      });
      let err = '';
      git.stderr.on('data', (d: Buffer) => (err += d.toString()));
      git.on('error', (e) => reject(new TaskError(`git clone failed: ${e.message}`, { code: 'SEED_FAILED', stage: 'init' })));
      // git names the host workdir in its errors: the task sees /workspace.
      git.on('close', (code) => (code === 0 ? resolve() : reject(new TaskError(`git clone of ${spec.gitRepo} failed: ${err.trim().split(workdir).join(WORKSPACE)}`, { code: 'SEED_FAILED', stage: 'init' }))));
    });
  }
  if (spec.seedDir) {
    if (!fs.existsSync(spec.seedDir) || !fs.statSync(spec.seedDir).isDirectory()) {
      throw new TaskError(`seedDir ${spec.seedDir} is not a directory`, { code: 'SEED_FAILED', stage: 'init' });
    }
    // A copy, never a shared mount: sandboxes of one group must not see each other's edits.
    try {
      fs.cpSync(spec.seedDir, workdir, { recursive: true, verbatimSymlinks: true, force: true });
    } catch (err) {
      // Node's message names host paths under the state dir: only the code goes out.
      const code = (err as NodeJS.ErrnoException).code ?? (err as Error).name;
      throw new TaskError(`copying seedDir ${spec.seedDir} into ${WORKSPACE} failed (${code})`, { code: 'SEED_FAILED', stage: 'init' });
    }
  }
  const files = Object.entries(spec.files ?? {});
  const bad = checkFileKeys(files.map(([k]) => k));
  if (bad.length) throw fileKeysError(bad);
  for (const [rel, content] of files) {
    try {
      await writeWorkspaceFile(workdir, rel, content, 'SEED_FAILED');
    } catch (err) {
      const key = JSON.stringify(rel.length > 200 ? `${rel.slice(0, 200)}...` : rel);
      throw new TaskError(`files: key ${key}: ${(err as Error).message}`, { code: 'SEED_FAILED', stage: 'init' });
    }
  }
}
