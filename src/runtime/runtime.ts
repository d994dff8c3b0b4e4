import { randomUUID } from 'node:crypto';
import { builtinHandlers } from '../handlers/builtin.js';
import { HandlerRegistry } from '../handlers/registry.js';
import type { ChatCodec } from '../llm/chat-codec.js';
import type { BackendInfo, BackendSpec, LlmClient, ManagedLlmClient } from '../llm/llm-client.js';
import { memberSeed } from '../llm/member-seed.js';
import type { RolloutResult } from '../protocol/trajectory.js';
import type { SandboxProvider } from '../sandbox/sandbox.js';
import type { ForkPoolStats } from '../protocol/sandbox.js';
import { ValidationError } from '../errors.js';
import { systemClock } from '../clock.js';
import { defaults } from './defaults.js';
import type { EventsOptions, ForkControl, ForkResult, GroupHandle, GroupOptions, RolloutHandle, RolloutSummary, Runtime, RuntimeStatus, SubmitOptions } from './runtime-api.js';
import { parseTreeOptions, treeNodes, type RolloutTree } from './rollout-tree.js';
import { materializeTrajectory } from './trajectory-prefix.js';
import type { Trajectory } from '../protocol/trajectory.js';
import { parseRuntimeOptions, type RuntimeOptions, type RuntimeOptionsInput } from './runtime-options.js';
import { Supervisor } from './supervisor.js';
import { summarize, type RolloutSession } from './rollout-session.js';
import { validateSubmission } from './submission.js';
import { newestVersion, WeightControl } from './weight-control.js';
import { isWeightVersion } from '../llm/weight-versions.js';
import { RolloutBuffer } from './rollout-buffer.js';
import { jobCodecResolver } from './job-codec.js';
import { abortEngines, type EngineAbortReport } from '../llm/engine-abort.js';
import type { RolloutBufferOptionsInput } from '../protocol/buffer.js';

/**
 * The embedded runtime: {@link Runtime} plus backend management that delegates to the LLM
 * client when it is a {@link ManagedLlmClient} (the backend pool).
 */
export interface EmbeddedRuntime extends Omit<Runtime, 'fork'>, ForkControl {
  /** The parsed, frozen options. */
  readonly options: RuntimeOptions;
  /** Adds an inference backend. Throws TypeError when the LLM client is not a backend pool. */
  addBackend(spec: BackendSpec): BackendInfo;
  /** Removes a backend now (its in-flight calls move elsewhere). Same throw as addBackend. */
  removeBackend(id: string): boolean;
  /** Stops new calls to a backend; in-flight ones finish. Same throw as addBackend. */
  drainBackend(id: string): boolean;
  listBackends(): BackendInfo[];
  /** Sets the weight version stamped on turns sampled from now on. Same throw as addBackend. */
  setWeightVersion(version: string | number, backendId?: string): void;
  /**
   * New LLM calls wait (calls in flight go on) until {@link resumeGeneration}: for a trainer that
   * syncs weights in place. The wait counts toward no rollout's time budget or no-progress limit
   * (the wall-clock cap still runs).
   */
  pauseGeneration(): void;
  /** Lets waiting LLM calls go on (subject to `maxStaleness`). */
  resumeGeneration(): void;
  /**
   * Aborts the generations in flight on every token-protocol engine of the pool (SGLang's
   * `POST /abort_request`, as `POST /v1/weights/abort` does): each returns what it had sampled and
   * the rollout resumes it on prompt + partial ids at its next call — after `resumeGeneration`
   * when paused, so pause → abort → update → resume lands the rest on the new weights. Resolves
   * with one report per engine; never throws for an engine (an engine without the route is
   * reported). `[]` when the LLM client is not a backend pool.
   */
  abortGeneration(): Promise<EngineAbortReport[]>;
  /** True between pauseGeneration and resumeGeneration. */
  readonly generationPaused: boolean;
  /** Records the version the trainer has consumed: results' `staleness` and the `maxStaleness` gate measure against it. */
  setTrainerVersion(version: string | number): void;
  /** The last version given to setTrainerVersion, or null. */
  readonly trainerVersion: string | number | null;
  /** Every `data_source` a handler serves (names and aliases), sorted: what `submit` routes. */
  dataSources(): readonly string[];
  /**
   * A rollout buffer of GRPO groups on this runtime (see {@link RolloutBuffer}): up to `groups`
   * in flight, over-provisioning, early stop, dynamic sampling. `sampling` is the default for
   * prompts added without their own. Throws ValidationError naming a bad option.
   */
  buffer(options: RolloutBufferOptionsInput, opts?: { sampling?: unknown; id?: string }): RolloutBuffer;
  /**
   * The codec a rollout this runtime still holds was tokenized with: its job's own
   * (`sampling.custom_tokenizer`, `reasoning_effort`) or the runtime's; undefined for an id it
   * does not hold.
   */
  codecOf(id: string): ChatCodec | undefined;
  /**
   * The sandbox hosts' fork pools summed (#26): branches parked and starting now, and the forks'
   * takes from the pools (hits), launches of their own (misses) and dead parked branches closed
   * (discarded) since each host started. Null when the sandbox provider has no fork pools (an
   * injected provider without `forkPoolStats`).
   */
  forkPoolStats(): Promise<ForkPoolStats | null>;
}

function isManaged(llm: LlmClient): llm is ManagedLlmClient {
  const m = llm as Partial<ManagedLlmClient>;
  return typeof m.addBackend === 'function' && typeof m.removeBackend === 'function' && typeof m.listBackends === 'function';
}

/**
 * Creates a runtime. Options are validated once (ValidationError names the bad field) and
 * frozen. Parts left out (`llm`, `sandboxes`, `codec`) come from `defaults.ts` and are closed by
 * `close()`; parts the caller passes in stay the caller's (a trainer may share one backend
 * pool between runtimes) and are not closed.
 */
export function createRuntime(input: RuntimeOptionsInput = {}): EmbeddedRuntime {
  const options = parseRuntimeOptions(input);
  const clock = options.clock ?? systemClock;
  const codec = options.codec ?? defaults.codec({ tokenizer: options.tokenizer, toolParser: options.toolParser });
  const ownsLlm = !options.llm;
  const ownsSandboxes = !options.sandboxes;
  const llm = options.llm ?? defaults.llm(codec, clock, options.backends);
  let sandboxes: SandboxProvider;
  try {
    sandboxes = options.sandboxes ?? defaults.sandboxes(options.sandboxDriver);
  } catch (err) {
    // The pool made above would keep its probe timers alive.
    // Creation failed: `err` is what the caller must see; the pool's close only stops its timers.
    if (ownsLlm) void llm.close?.().catch(() => undefined);
    throw err;
  }
  const registry = new HandlerRegistry(options.builtinHandlers ? builtinHandlers : []);
  for (const h of options.handlers) registry.register(h);
  const knownSources = Object.freeze(registry.keys());
  // The staleness gate reads the backends' versions live: an update lets waiting calls go at once.
  const weights = new WeightControl(options.maxStaleness ?? null, () => (isManaged(llm) ? newestVersion(llm.listBackends()) : null));
  const sup = new Supervisor(options, { llm, sandboxes, codec, registry, clock, weights });
  const jobCodec = jobCodecResolver(codec, (spec) => defaults.codec(spec));
  let closing: Promise<void> | null = null;

  const handle = (s: RolloutSession): RolloutHandle => ({
    id: s.id,
    result: s.promise,
    cancel: async (reason?: string) => {
      await sup.cancel(s.id, reason);
      await s.promise;
    },
  });

  /**
   * A tree group's handle: its nodes are the roots plus every branch admitted into the group
   * (a node's branches are admitted before the node itself ends, so once every known node has
   * ended no other can come).
   */
  const treeGroup = (groupId: string, roots: RolloutHandle[]): GroupHandle => {
    const nodes = [...roots];
    const seen = new Set(roots.map((r) => r.id));
    const unwatch = sup.forks.watchGroup(groupId, (s) => {
      if (!seen.has(s.id)) {
        seen.add(s.id);
        nodes.push(handle(s));
      }
    });
    const settle = async (): Promise<RolloutResult[]> => {
      for (let known = -1; known !== nodes.length; ) {
        known = nodes.length;
        await Promise.all(nodes.map((h) => h.result));
      }
      unwatch();
      return Promise.all(nodes.map((h) => h.result));
    };
    const results = settle();
    const tree = results.then((rs): RolloutTree => {
      const prefixes: Record<string, Trajectory> = {};
      for (const r of rs) sup.forks.prefixes.chain(r.trajectory, prefixes);
      return { groupId, ...treeNodes(rs), prefixes };
    });
    return {
      groupId,
      rollouts: roots,
      results,
      tree,
      cancel: async (reason?: string) => {
        // Until no node is left live: a node cancelled mid-fork may have admitted branches.
        for (let known = -1; known !== nodes.length; ) {
          known = nodes.length;
          await Promise.all(nodes.map((h) => h.cancel(reason)));
        }
      },
    };
  };

  const managed = (): ManagedLlmClient => {
    if (!isManaged(llm)) throw new TypeError('the runtime\'s LLM client does not manage backends (pass a backend pool as options.llm)');
    return llm;
  };

  const runtime: EmbeddedRuntime = {
    options,
    submit(instance: unknown, sampling?: unknown, opts: SubmitOptions = {}): RolloutHandle {
      const v = validateSubmission(instance, sampling);
      const c = jobCodec(v.sampling);
      sup.checkAdmission(1);
      return handle(sup.admit(v.instance, v.sampling, opts.id, opts.groupId ?? null, c, opts.priority ?? 0));
    },
    submitGroup(instance: unknown, sampling: unknown, n: number, opts: GroupOptions = {}): GroupHandle {
      if (!Number.isInteger(n) || n < 1) throw new ValidationError('group size n must be a positive integer', [{ path: 'n', message: 'must be a positive integer' }]);
      const tree = opts.tree === undefined ? null : parseTreeOptions(opts.tree, n);
      const v = validateSubmission(instance, sampling);
      const c = jobCodec(v.sampling);
      // All or nothing: a group is only useful whole (a tree: every node it will grow).
      sup.checkAdmission(tree?.nodes ?? n);
      const groupId = opts.groupId ?? randomUUID();
      const rollouts: RolloutHandle[] = [];
      for (let i = 0; i < n; i++) {
        // One group seed, n distinct member seeds (identical members would have zero advantage).
        const s = sup.admit({ ...v.instance, trajectory_id: String(i) }, v.sampling.seed === undefined ? v.sampling : { ...v.sampling, seed: memberSeed(v.sampling.seed, i) }, undefined, groupId, c);
        if (tree) s.startAsBranch(null, null, tree.tree);
        rollouts.push(handle(s));
      }
      if (tree) return treeGroup(groupId, rollouts);
      return {
        groupId,
        rollouts,
        results: Promise.all(rollouts.map((r) => r.result)) as Promise<RolloutResult[]>,
        cancel: async (reason?: string) => {
          await Promise.all(rollouts.map((r) => r.cancel(reason)));
        },
      };
    },
    cancel: (id, reason) => sup.cancel(id, reason),
    fork: async (id, opts): Promise<ForkResult> => {
      const o = await sup.forks.request(id, opts);
      return { parentId: o.parentId, rollouts: o.branches.map(handle), rolloutIds: o.branches.map((b) => b.id), branchTurn: o.branchTurn, prefixId: o.prefixId, lost: o.lost, frozenMs: o.frozenMs };
    },
    prefix: (id) => sup.forks.prefixes.get(id),
    materialize: (t, o) => materializeTrajectory(t, (id) => sup.forks.prefixes.get(id), o),
    dataSources: () => knownSources,
    buffer: (o, extra = {}) => new RolloutBuffer(runtime, o, { ...extra, clock, trainerVersion: () => weights.trainerVersion }),
    codecOf: (id) => sup.find(id)?.codec,
    get(id: string): RolloutSummary | undefined {
      const s = sup.find(id);
      return s ? summarize(s) : undefined;
    },
    list(filter = {}): RolloutSummary[] {
      const out: RolloutSummary[] = [];
      for (const s of sup.all()) {
        if (filter.state && s.state !== filter.state) continue;
        if (filter.groupId && s.groupId !== filter.groupId) continue;
        if (filter.outcome && s.result?.outcome !== filter.outcome) continue;
        out.push(summarize(s));
      }
      return out;
    },
    events: (opts: EventsOptions = {}) => sup.hub.subscribe(opts),
    status: (): RuntimeStatus => sup.status(),
    close(opts: { drain?: boolean } = {}): Promise<void> {
      closing ??= (async () => {
        await sup.shutdown(opts.drain ?? false);
        const closes: Promise<unknown>[] = [];
        // Both are closed whatever the other does; neither close has anything left to release on error.
        if (ownsLlm && llm.close) closes.push(llm.close().catch(() => {}));
        if (ownsSandboxes) closes.push(sandboxes.close().catch(() => {}));
        await Promise.all(closes);
      })();
      return closing;
    },
    addBackend: (spec) => managed().addBackend(spec),
    removeBackend: (id) => managed().removeBackend(id),
    drainBackend: (id) => managed().drainBackend(id),
    listBackends: () => (isManaged(llm) ? llm.listBackends() : []),
    forkPoolStats: async () => (sandboxes.forkPoolStats ? sandboxes.forkPoolStats() : null),
    setWeightVersion: (version, backendId) => {
      if (!isWeightVersion(version)) throw new ValidationError('weight version must be a finite number or a non-empty string of at most 200 characters', [{ path: 'version', message: 'expected a number or a string' }]);
      managed().setWeightVersion(version, backendId);
      weights.changed();
    },
    pauseGeneration: () => weights.pause(),
    resumeGeneration: () => weights.resume(),
    abortGeneration: async () => (isManaged(llm) ? abortEngines(llm.listBackends()) : []),
    get generationPaused() {
      return weights.isPaused;
    },
    setTrainerVersion: (version) => {
      if (!isWeightVersion(version)) throw new ValidationError('trainer version must be a finite number or a non-empty string of at most 200 characters', [{ path: 'trainer_version', message: 'expected a number or a string' }]);
      weights.setTrainerVersion(version);
    },
    get trainerVersion() {
      return weights.trainerVersion;
    },
  };
  return runtime;
}
