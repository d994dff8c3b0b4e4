import { every, systemClock, type Clock } from '../clock.js';
import { removeGatedLeftovers, type GatedLaunch } from './branch-fs.js';
import type { ForkPoolStats } from '../protocol/sandbox.js';

/** What {@link ForkPool} is configured with (sandbox options `forkPool`, sent in `host.hello`). */
export interface ForkPoolOptions {
  /** Parked branches kept per parent configuration; 0 disables the pool. */
  size: number;
  /** A configuration with no fork for this long has its parked branches closed. */
  idleMs: number;
}

interface Parked<S> {
  launch: GatedLaunch<S>;
  /** When it was launched ({@link ForkPool.clock} ms): past `idleMs` it is no longer handed out. */
  at: number;
  /** Its start failed (the shell died at its gate): never handed out. */
  dead: boolean;
}

interface KeyPool<S> {
  parked: Array<Parked<S>>;
  starting: number;
  lastUse: number;
  /** Consecutive failed launches: refilling pauses after 3 until the next fork. */
  failures: number;
  /** Parked and starting branches it is kept at: `size` once a fork used it; a prewarm's `n` (at most `size`) until then. */
  target: number;
  /** Made by a prewarm and not yet used by a fork (its fork is coming): another prewarm does not evict it. */
  awaited: boolean;
  /** Launches `n` parked branches of this configuration (the fork that made the pool gave it). */
  launch: (n: number) => Promise<Array<GatedLaunch<S>>>;
}

/** Configurations with a pool at once: the least recently forked one goes when another comes. */
const MAX_KEYS = 4;

/**
 * A sandbox host's pool of gated fork branches (#26), started before any fork asks for them: each
 * is what a fork's fast path launches (branch-fs.ts `launchGated`: its tmpfs root with an empty
 * propagation-shared workspace, its cgroups and lease, its shell running and waiting on its gate),
 * only launched ahead, under a host-made sandbox id. A fork of a parent whose configuration has a
 * pool takes up to K of them (oldest first), mounts their overlays, writes their state and opens
 * their gates as it does for its own; so its branches' launches — the dearest part of a fork —
 * are off its path altogether.
 *
 * Keyed by the branch's launch configuration (the parent's request but for ids and seeding: its
 * uid, limits, env, network, rootfs): a branch keeps its parent's uid (the snapshot's files are
 * its), so a pool serves the forks of one parent and of its branches — a tree, or a parent forked
 * again — not of another rollout's sandbox. It is filled after a fork (a configuration is learnt
 * from a fork), or before the first one when the runtime knows a fork is coming and asks for it
 * ({@link prewarm}: a tree rollout's root), refilled in the background after each take, and closed
 * after `idleMs` without a fork (or prewarm) of its configuration, or when {@link MAX_KEYS} newer
 * ones came.
 *
 * A parked branch is a sandbox like any other for the cleanup: its directory has a lease naming
 * the runtime and this host (the reaps of a dead host and of a dead runtime remove it), its
 * processes are in its cgroups, and {@link close} ends every one (the host's exit path). A parked
 * branch whose shell died is closed and dropped, never handed out; one older than `idleMs` is
 * closed at the next take (its shell's start allows `idleMs` at the gate).
 */
export class ForkPool<S extends { close(): Promise<void> }> {
  private readonly pools = new Map<string, KeyPool<S>>();
  private readonly closing = new Set<Promise<void>>();
  private readonly launching = new Set<Promise<void>>();
  private readonly stopSweep: () => void;
  private closed = false;
  private hits = 0;
  private misses = 0;
  private discarded = 0;

  constructor(
    private readonly options: ForkPoolOptions,
    private readonly clock: Clock = systemClock,
  ) {
    // every() unrefs its timer: an idle pool never keeps the host alive.
    this.stopSweep = options.size > 0 ? every(clock, Math.max(1000, Math.floor(options.idleMs / 4)), () => this.sweep()) : () => undefined;
  }

  /** False when the pool is disabled (size 0) or closed. */
  get enabled(): boolean {
    return this.options.size > 0 && !this.closed;
  }

  /** How long a parked branch's shell may wait at its gate. */
  get parkMs(): number {
    return this.options.idleMs;
  }

  /**
   * Takes up to `n` live parked branches of configuration `key`, oldest first, and refills
   * nothing (see {@link fill}). Dead or expired ones met on the way are closed.
   */
  take(key: string, n: number): Array<GatedLaunch<S>> {
    const pool = this.pools.get(key);
    const out: Array<GatedLaunch<S>> = [];
    if (pool && this.enabled) {
      pool.lastUse = this.clock.now();
      pool.awaited = false;
      while (out.length < n && pool.parked.length > 0) {
        const p = pool.parked.shift()!;
        if (p.dead || this.clock.now() - p.at > this.options.idleMs || !(p.launch.hold.alive?.() ?? true)) {
          this.discard(p);
          continue;
        }
        out.push(p.launch);
      }
    }
    this.hits += out.length;
    this.misses += n - out.length;
    return out;
  }

  /**
   * Keeps `size` parked branches of configuration `key` (launched by `launch`, in one batch),
   * in the background. A fork calls it once it has its branches.
   */
  fill(key: string, launch: (n: number) => Promise<Array<GatedLaunch<S>>>): void {
    if (!this.enabled) return;
    let pool = this.pools.get(key);
    if (!pool) {
      pool = { parked: [], starting: 0, lastUse: this.clock.now(), failures: 0, launch, target: this.options.size, awaited: false };
      this.pools.set(key, pool);
      this.evict();
    }
    pool.lastUse = this.clock.now();
    pool.failures = 0;
    pool.target = this.options.size;
    pool.awaited = false;
    pool.launch = launch;
    this.refill(pool);
  }

  /**
   * Parks branches of configuration `key` ahead of its first fork (host-fork.ts `prewarmFork`):
   * keeps `min(n, size)` of them parked or starting, launched by `launch` in the background, and
   * answers how many there are for it now (0 with the pool disabled). Unlike {@link fill} it
   * never lowers a pool already kept at more, never restarts a refill paused by failures (only a
   * fork, which proves the configuration, does), and at {@link MAX_KEYS} configurations it evicts
   * the least recently used one that is not itself prewarmed and still waiting for its first
   * fork — none such: it answers 0 and launches nothing. So a batch of prewarms (a group's tree
   * roots, started together) does not churn itself (the first four stay warm, the rest fork
   * cold), while configurations of forks past are replaced as a trainer's roots come and go.
   * `n` is capped at `size`, the operator's bound on parked shells per configuration; a tree
   * level of `w` siblings each forking `w` finds `size` parked (the first fork's refill), so
   * `size` ≥ w² keeps such a level warm.
   */
  prewarm(key: string, launch: (n: number) => Promise<Array<GatedLaunch<S>>>, n: number): number {
    if (!this.enabled || n < 1) return 0;
    let pool = this.pools.get(key);
    if (!pool) {
      if (this.pools.size >= MAX_KEYS) {
        const old = this.leastRecent((p) => !p.awaited);
        if (old === null) return 0;
        this.drop(old[0], old[1]);
      }
      pool = { parked: [], starting: 0, lastUse: this.clock.now(), failures: 0, launch, target: 0, awaited: true };
      this.pools.set(key, pool);
    }
    pool.lastUse = this.clock.now();
    pool.target = Math.max(pool.target, Math.min(n, this.options.size));
    this.refill(pool);
    return Math.min(pool.parked.length + pool.starting, n);
  }

  private refill(pool: KeyPool<S>): void {
    const n = pool.target - pool.parked.length - pool.starting;
    if (n <= 0 || this.closed || pool.failures >= 3 || ![...this.pools.values()].includes(pool)) return;
    pool.starting += n;
    const launching = pool.launch(n).then(
      (launches) => {
        pool.starting -= n;
        for (const launch of launches) {
          const p: Parked<S> = { launch, at: this.clock.now(), dead: false };
          // A shell that dies at its gate fails its start: dropped at once (its start closed it).
          // (A start resolves only past an opened gate: by then a fork has taken it.)
          // A replacement is launched; three deaths in a row (a configuration whose shells cannot
          // wait) pause the refill until the next fork.
          launch.start.catch(() => {
            p.dead = true;
            const i = pool.parked.indexOf(p);
            if (i < 0) return;
            pool.parked.splice(i, 1);
            this.discard(p);
            pool.failures++;
            this.refill(pool);
          });
          if (this.closed || ![...this.pools.values()].includes(pool)) this.discard(p);
          else pool.parked.push(p);
        }
      },
      () => {
        pool.starting -= n;
        pool.failures++;
        this.refill(pool);
      },
    );
    this.launching.add(launching);
    // Only the bookkeeping: `launching` cannot reject (both outcomes handled above); close() awaits it.
    void launching.finally(() => this.launching.delete(launching));
  }

  /** Ends a parked branch: its gate refused (its shell exits, its start fails and closes it), then what is left removed. */
  private discard(p: Parked<S>): void {
    this.discarded++;
    p.launch.gate.refuse();
    const done = p.launch.start
      .then(
        (sb) => sb.close(),
        () => undefined,
      )
      .then(() => {
        p.launch.gate.close();
        return removeGatedLeftovers(p.launch.dir);
      });
    this.closing.add(done);
    // Only the bookkeeping: `done` cannot reject (a close never throws, nor does the removal); close() awaits it.
    void done.finally(() => this.closing.delete(done));
  }

  private sweep(): void {
    const now = this.clock.now();
    for (const [key, pool] of this.pools) if (now - pool.lastUse > this.options.idleMs) this.drop(key, pool);
  }

  private evict(): void {
    while (this.pools.size > MAX_KEYS) {
      const [key, pool] = this.leastRecent()!;
      this.drop(key, pool);
    }
  }

  /** The least recently forked configuration among those `admit` admits (the first on a tie); null when none. */
  private leastRecent(admit: (pool: KeyPool<S>) => boolean = () => true): [string, KeyPool<S>] | null {
    let out: [string, KeyPool<S>] | null = null;
    for (const entry of this.pools) if (admit(entry[1]) && (out === null || entry[1].lastUse < out[1].lastUse)) out = entry;
    return out;
  }

  private drop(key: string, pool: KeyPool<S>): void {
    this.pools.delete(key);
    for (const p of pool.parked.splice(0)) this.discard(p);
  }

  /** Closes every parked branch (and those still launching, once launched) and waits for them. */
  async close(): Promise<void> {
    this.closed = true;
    this.stopSweep();
    for (const [key, pool] of this.pools) this.drop(key, pool);
    // Launches in flight discard their branches as they land (closed is set): those first.
    await Promise.all([...this.launching]);
    await Promise.all([...this.closing]);
  }

  stats(): ForkPoolStats {
    const pools = [...this.pools.values()];
    return {
      keys: pools.length,
      parked: pools.reduce((n, p) => n + p.parked.length, 0),
      starting: pools.reduce((n, p) => n + p.starting, 0),
      hits: this.hits,
      misses: this.misses,
      discarded: this.discarded,
    };
  }
}
