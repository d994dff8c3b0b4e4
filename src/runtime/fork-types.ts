import type { TrajectoryBuilder } from '../llm/trajectory-builder.js';
import type { TrajectoryPrefixRef } from '../protocol/trajectory.js';
import type { Sandbox } from '../sandbox/sandbox.js';
import type { TreeOptions } from './rollout-tree.js';

/**
 * The data of forks (#26) that the session, the coordinator and the API share; the behaviour is
 * in rollout-fork.ts. Kept apart so the session's module does not import the coordinator's.
 */

/** What `rt.fork` is asked (#26). */
export interface ForkOptions {
  /** Branches to make: a positive integer no larger than the RUN limit or the admission room. */
  n: number;
  /**
   * The turn boundary to fork at, when the caller wants to be sure of it: it must be the
   * rollout's next boundary (the sandbox keeps no per-turn history, so an earlier turn cannot be
   * forked, and a later one is not waited for). Default: the next boundary.
   */
  atTurn?: number | undefined;
  /** Whether the forked rollout goes on after the fork. Default true. */
  continueParent?: boolean | undefined;
}

/** A fork that was made: its branches (sessions `S`) are admitted and running. */
export interface ForkOutcome<S> {
  parentId: string;
  /** The branch sessions, in order. */
  branches: S[];
  /** The turn boundary forked at: assistant turns sampled before it. */
  branchTurn: number;
  /** The shared prefix the branches reference (`rt.prefix(id)`). */
  prefixId: string;
  /** What the branches did not get from the parent (told to each branch's policy after its first action). */
  lost: string[];
  frozenMs: number;
}

/** A fork waiting for its rollout's next turn boundary. */
export interface PendingFork {
  n: number;
  continueParent: boolean;
  /** The boundary it waits for. */
  turn: number;
  resolve(o: ForkOutcome<unknown>): void;
  reject(e: unknown): void;
}

/** Where a branch starts: taken by its first (and only) attempt. */
export interface BranchStart {
  builder: TrajectoryBuilder;
  sandbox: Sandbox;
  handlerState: unknown;
  lost: string[];
}

/** What a branch's session records of its origin. */
export interface BranchOrigin {
  parentId: string;
  branchTurn: number;
  prefix: TrajectoryPrefixRef;
}

/** A tree plan: the boundaries left where the rollout forks, and the width. */
export type TreePlan = TreeOptions;
