import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { systemClock } from '../clock.js';
import { SandboxError } from '../errors.js';
import type { SandboxCreate } from '../protocol/sandbox.js';
import type { PidsCgroup } from './cgroup.js';
import { EarlyBranches, launchGated, type GatedBranch, type GatedLaunch } from './branch-fs.js';
import { ForkSnapshot } from './fork-snapshot.js';
import type { ForkPool } from './fork-pool.js';
import type { Mounter } from './mounter.js';
import { sandboxesDir, type Lease } from './lease.js';
import type { PtySession } from './pty-session.js';
import { captureCommand, statusLine } from './shell-state.js';

/** Who owns the host, as said in `host.hello`. */
export interface HostOwner {
  runtimeId: string;
  ownerPid: number;
  ownerStart: string | null;
}

/** What a fork's branch starts from when it is made after the snapshot (image sandboxes, the unshare driver). */
export interface BranchStart {
  /** The parent's filesystem, the lower layer of the branch's own. */
  snapshot: ForkSnapshot;
  /** The parent shell's state as a script to source (shell-state.ts). */
  shellState: string;
  /** The parent's last exit code, the branch's first `$?`. */
  lastExit: number | null;
}

/** The rollout id a parked branch's lease names until a fork takes it (fork-pool.ts). */
export const POOL_ROLLOUT_ID = 'fork-pool';

/** One branch a fork is asked for: the id proposed for it (a pooled branch keeps its own), its rollout, its LLM proxy. */
export interface ForkBranchRequest {
  sandboxId: string;
  rolloutId: string;
  llmProxy?: { socketPath: string; token: string } | undefined;
}

/**
 * What a fork sees of the sandbox it forks (HostSandbox.forkParent): the few members it needs,
 * read at a turn boundary (no command or cell running).
 */
export interface ForkParent {
  id: string;
  req: SandboxCreate;
  uid: number | null;
  pty: PtySession;
  /** Its cgroups, with a freezer group (checked by the parent). */
  cgroup: PidsCgroup;
  lease: Lease;
  /** The snapshot the parent itself stands on (a branch), or null. */
  snapshot: ForkSnapshot | null;
  /** The directory holding what the parent changed: an fd (its own, closed by `done`) for the snapshot to take. */
  changes(): { fd: number; done(): void };
  /** Its processes other than the shell and the REPL (and the chain between them), read while frozen. */
  strays(): number[];
  /** True when its Python REPL was started (its heap is not carried). */
  replStarted(): boolean;
  /** The host pid of its shell, or null. */
  shellPid(): number | null;
  close(): Promise<void>;
}

/** What a fork is given by its host. */
export interface ForkContext<S extends { close(): Promise<void> }> {
  stateDir: string;
  owner: HostOwner;
  onLost: (sandboxId: string) => (reason: string) => void;
  /** The host's pool of parked branches (null: none). */
  pool: ForkPool<S> | null;
  /** The host's mount helper (null: `mount` is spawned). */
  mounter: Mounter | null;
  /** Makes a sandbox (HostSandbox.create): a gated branch, or one made after the snapshot. */
  create(req: SandboxCreate, ctx: { stateDir: string; owner: HostOwner; onLost: (reason: string) => void; branchOf?: BranchStart; gated?: GatedBranch }): Promise<S>;
}

/** What a fork gives back. */
export interface ForkResult<S> {
  branches: S[];
  lost: string[];
  frozenMs: number;
  copiedBytes: number;
  /** Without keepParent: the parent's close, under way, for the host to wait on before it exits. */
  parentClosed: Promise<void> | null;
}

/** A fork's shell state file in a branch's control dir. */
export function shellStateName(sandboxId: string): string {
  return `fork-state-${sandboxId}.sh`;
}

/** A branch's request: the parent's, with its own ids and LLM proxy; no seed, no setup (its files come from the snapshot, its parent's uid owns them). */
function branchRequest(parent: SandboxCreate, b: ForkBranchRequest): SandboxCreate {
  return { ...parent, sandboxId: b.sandboxId, rolloutId: b.rolloutId, spec: { ...parent.spec, files: undefined, seedDir: undefined, gitRepo: undefined, setup: undefined, llmProxy: b.llmProxy } };
}

/**
 * A parent's pool key: its branches' request without the ids. Two parents with one key launch
 * identical branch shells (same uid, limits, env, network, rootfs); a request's keys come in one
 * order (a branch's is its parent's, spread), so JSON names it.
 */
function poolKey(parent: SandboxCreate): string {
  return JSON.stringify(branchRequest(parent, { sandboxId: '', rolloutId: '' }));
}

/** True when `parent`'s branches take the fast path (branch-fs.ts): a host-root sandbox under bwrap. */
function fastPath(parent: SandboxCreate): boolean {
  return parent.driver === 'bwrap' && !parent.image;
}

/** What {@link launchGated} is given for a branch of `parent`: its launch options. */
function launchOptions<S extends { close(): Promise<void> }>(parent: Pick<ForkParent, 'req' | 'uid'>, ctx: ForkContext<S>): { bytes: number; uid: number | null; stateDir: string; mounter: Mounter | null } {
  return { bytes: parent.req.limits.workdirBytes, uid: parent.uid, stateDir: ctx.stateDir, mounter: ctx.mounter };
}

/** Branch `b` of `parent` as {@link launchGated} launches it (`parkMs` > 0: parked in the pool, its shell waits that long at its gate). */
function gatedOf<S extends { close(): Promise<void> }>(parent: Pick<ForkParent, 'req'>, b: ForkBranchRequest, ctx: ForkContext<S>, parkMs = 0): { dir: string; stateFile: string; create: (gated: GatedBranch) => Promise<S> } {
  const dir = path.join(sandboxesDir(ctx.stateDir), b.sandboxId);
  return {
    dir,
    stateFile: path.join(dir, 'fs', 'ctl', shellStateName(b.sandboxId)),
    create: (gated) => ctx.create(branchRequest(parent.req, b), { stateDir: ctx.stateDir, owner: ctx.owner, onLost: ctx.onLost(b.sandboxId), gated: parkMs ? { ...gated, parkMs } : gated }),
  };
}

/**
 * The host's pool for the forks of `parent`, its key, and the launcher of its parked branches
 * (host ids, no rollout yet): the one path by which a fork's refill and a prewarm fill it. Null
 * when they cannot use the pool: no fast path (an image sandbox, the unshare driver), the pool
 * disabled (size 0), or a branch given an LLM proxy (its socket and token are its own).
 */
function poolSide<S extends { close(): Promise<void> }>(parent: Pick<ForkParent, 'req' | 'uid'>, ctx: ForkContext<S>, branches: readonly ForkBranchRequest[]): { pool: ForkPool<S>; key: string; launch: (n: number) => Promise<Array<GatedLaunch<S>>> } | null {
  const pool = ctx.pool;
  if (!pool?.enabled || !fastPath(parent.req) || branches.some((b) => b.llmProxy)) return null;
  const opts = launchOptions(parent, ctx);
  const parkMs = pool.parkMs;
  const launch = (n: number): Promise<Array<GatedLaunch<S>>> => launchGated(Array.from({ length: n }, () => gatedOf(parent, { sandboxId: `sb-${crypto.randomBytes(6).toString('hex')}`, rolloutId: POOL_ROLLOUT_ID }, ctx, parkMs)), opts);
  return { pool, key: poolKey(parent.req), launch };
}

/**
 * Parks up to `n` branches of `parent`'s configuration in the host's fork pool ahead of its first
 * fork (Sandbox.prewarmFork, #26): the same key and launcher as that fork's refill
 * ({@link poolSide}), so the fork takes them as it takes a refill's. Answers how many are parked
 * or starting for it (at most `n`; fork-pool.ts `prewarm` says when fewer). 0, with nothing
 * launched, when its forks could not use the pool ({@link poolSide}) or when `parent` was made
 * with an LLM proxy (the external agents it serves cannot fork; a branch would need its own).
 * Never throws: a launch that fails is the pool's (it counts it, as a refill's).
 */
export function prewarmFork<S extends { close(): Promise<void> }>(parent: Pick<ForkParent, 'req' | 'uid'>, n: number, ctx: ForkContext<S>): number {
  if (parent.req.spec.llmProxy) return 0;
  const side = poolSide(parent, ctx, []);
  if (!side) return 0;
  // The fork's mounts go through the helper: started now, off the first fork's path.
  ctx.mounter?.warm();
  return side.pool.prewarm(side.key, side.launch, n);
}

/**
 * Forks `parent` at a turn boundary into one branch per `req.branches` entry (Sandbox.fork, #26).
 *
 * In order: the shell's state is captured (an internal command: shell-state.ts; without
 * `keepParent` the snapshot's bind is made meanwhile); every process is frozen (cgroup
 * freezer); what a branch cannot get is listed; the filesystem is snapshotted
 * (fork-snapshot.ts: shared without a copy when the parent ends here, else copied once); then,
 * with `keepParent`, the parent is thawed; the branches are made on this host from the
 * snapshot, each restoring the shell state; without `keepParent` the parent, frozen until they
 * all stand, is closed last (`parentClosed`).
 *
 * A host-root sandbox under bwrap takes the fast path (branch-fs.ts): its branches' shells stand
 * waiting on their gates over an empty /workspace before the snapshot exists — taken from the
 * host's fork pool (fork-pool.ts: launched before the fork was asked, under ids the host made;
 * not for branches given an LLM proxy) or, for those the pool lacks, launched at the fork's
 * start while the capture, the freeze and the snapshot run. Once the snapshot stands, one process
 * mounts every branch's overlay (it reaches the running sandboxes by mount propagation), the
 * state files are written and the gates open; the pool then refills in the background. Image
 * sandboxes (their whole root is the branch's overlay) and the unshare driver (its namespace is
 * private) make their branches after the snapshot, with no pool.
 *
 * @throws SandboxError `FORK_FAILED` when the snapshot or a branch cannot be made,
 *   `FREEZE_UNAVAILABLE` when the freeze fails — in every case the parent is as it was (thawed,
 *   running) and no branch or snapshot is left (a pooled branch taken is closed).
 */
export async function forkSandbox<S extends { id: string; close(): Promise<void> }>(parent: ForkParent, req: { branches: ForkBranchRequest[]; keepParent: boolean }, ctx: ForkContext<S>): Promise<ForkResult<S>> {
  const { pty, cgroup } = parent;
  ctx.mounter?.warm();
  const lastExit = pty.lastExitCode;
  const capture = captureCommand(lastExit);
  const takeSnapshot = async (): Promise<ForkSnapshot> => {
    const source = parent.changes();
    try {
      return await ForkSnapshot.take(source.fd, {
        stateDir: ctx.stateDir,
        mode: req.keepParent ? 'copy' : 'share',
        parent: parent.snapshot,
        mounter: ctx.mounter,
        bytes: parent.req.limits.workdirBytes,
        lease: { runtimeId: parent.lease.runtimeId, ownerPid: parent.lease.ownerPid, ownerStart: parent.lease.ownerStart, rolloutId: parent.lease.rolloutId },
      });
    } finally {
      source.done();
    }
  };
  const makeReq = (b: ForkBranchRequest): SandboxCreate => branchRequest(parent.req, b);
  const captured = pty.internal(capture.command, parent.req.tools.startTimeoutMs);
  const early = fastPath(parent.req);
  const side = poolSide(parent, ctx, req.branches);
  // Pooled branches first, in the order asked; the pool's own ids, their rollouts named at the take.
  const taken = side ? side.pool.take(side.key, req.branches.length) : [];
  taken.forEach((t, i) => (t.hold.rolloutId = req.branches[i]!.rolloutId));
  let launched: EarlyBranches<S> | null = null;
  let snapshot: ForkSnapshot | null = null;
  let frozen = false;
  let frozenAt = 0;
  let lost: string[];
  let shellState: string;
  try {
    // Without keepParent the snapshot is a bind of the parent's own directory, no copy: nothing
    // of it depends on what the files hold, so it is made while the shell prints its state and
    // the branches launch (the parent is frozen before any branch mounts it). A copy waits for
    // the freeze.
    const [l, s] = await Promise.allSettled([
      early ? launchGated(req.branches.slice(taken.length).map((b) => gatedOf(parent, b, ctx)), launchOptions(parent, ctx)).then((own) => new EarlyBranches<S>([...taken, ...own])) : null,
      req.keepParent ? null : takeSnapshot(),
    ]);
    if (l.status === 'fulfilled') launched = l.value;
    if (s.status === 'fulfilled') snapshot = s.value;
    // A launch that failed leaves the taken branches to end here.
    if (l.status === 'rejected') {
      await new EarlyBranches<S>(taken).abort();
      throw l.reason;
    }
    if (s.status === 'rejected') throw s.reason;
    shellState = capture.parse(await captured);
    frozenAt = systemClock.now();
    try {
      await cgroup.freeze();
    } catch (err) {
      throw new SandboxError(`sandbox ${parent.id} could not be frozen: ${(err as Error).message}`, { code: 'FREEZE_UNAVAILABLE', cause: err });
    }
    frozen = true;
    lost = lostAtFork(parent);
    snapshot ??= await takeSnapshot();
    if (launched) await launched.mount(snapshot, ctx.mounter);
  } catch (err) {
    // Only waited for, so the parent's shell is idle again: the fork fails with `err` already.
    await captured.catch(() => undefined);
    if (frozen) cgroup.thaw();
    await launched?.abort();
    await snapshot?.release();
    throw err;
  }
  let frozenMs = 0;
  if (req.keepParent) {
    cgroup.thaw();
    frozenMs = systemClock.now() - frozenAt;
  }
  // The fork's own hold: a branch that fails and releases cannot take the snapshot with it.
  snapshot.acquire();
  const made = launched
    ? await launched.open(snapshot, shellState + statusLine(lastExit))
    : await Promise.allSettled(req.branches.map((b) => ctx.create(makeReq(b), { stateDir: ctx.stateDir, owner: ctx.owner, onLost: ctx.onLost(b.sandboxId), branchOf: { snapshot: snapshot!, shellState, lastExit } })));
  const branches = made.flatMap((m) => (m.status === 'fulfilled' ? [m.value] : []));
  const failed = made.find((m): m is PromiseRejectedResult => m.status === 'rejected');
  if (failed) {
    await Promise.all(branches.map((b) => b.close()));
    await launched?.removeLeftovers();
    cgroup.thaw();
    await snapshot.release();
    const e = failed.reason as Error;
    throw new SandboxError(`sandbox ${parent.id}: a fork branch could not be made: ${e.message}`, { code: 'FORK_FAILED', cause: e });
  }
  // Without keepParent the parent ends here; its close (kills, unmounts, removal: ~0.1 s) runs
  // on after the answer, the branches no longer need anything of it but the snapshot's bind.
  let parentClosed: Promise<void> | null = null;
  if (!req.keepParent) {
    frozenMs = systemClock.now() - frozenAt;
    // Started after the answer: close's first step scans every process (~20 ms loaded). The
    // host drops the parent from its table before it answers, so nothing reaches it meanwhile.
    parentClosed = new Promise<void>((r) => setImmediate(r)).then(() => parent.close());
  }
  await snapshot.release();
  // The pool refills after the answer, so its launches never share the CPU with this fork's.
  if (side) setImmediate(() => side.pool.fill(side.key, side.launch));
  return { branches, lost, frozenMs, copiedBytes: snapshot.copiedBytes, parentClosed };
}

/** What a branch does not get, in words for the policy (Sandbox.fork's `lost`); read while the parent is frozen. */
function lostAtFork(parent: ForkParent): string[] {
  const lost: string[] = [];
  const strays = parent.strays();
  if (strays.length) {
    const names = [...new Set(strays.map((p) => readComm(p)).filter((n): n is string => n !== null))];
    lost.push(`${strays.length} background process${strays.length > 1 ? 'es' : ''} (${names.join(', ')})`);
  }
  if (parent.replStarted()) lost.push("the Python REPL's state (its variables, imports and definitions)");
  const tmp = tmpEntries(parent.shellPid());
  if (tmp > 0) lost.push(`${tmp} entr${tmp > 1 ? 'ies' : 'y'} in /tmp (the shell's private /tmp is not carried)`);
  return lost;
}

/**
 * How many entries the shell's private /tmp holds, read through its root (0 when unreadable,
 * or when the sandbox made /tmp a link: an absolute one would resolve against the host's root).
 */
function tmpEntries(shellPid: number | null): number {
  if (!shellPid) return 0;
  const tmp = `/proc/${shellPid}/root/tmp`;
  try {
    if (!fs.lstatSync(tmp).isDirectory()) return 0;
    return fs.readdirSync(tmp).length;
  } catch {
    return 0;
  }
}

/** A process's `comm` (its executable's name, as ps shows it), or null when it is gone. */
function readComm(pid: number): string | null {
  try {
    return fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return null;
  }
}
