import { z } from 'zod';
import { FinishReasonSchema, OutcomeSchema } from './trajectory.js';
import { RolloutStateSchema } from './events.js';

/**
 * `POST /v1/rollouts/{id}/fork` (#26): `n` branches at the rollout's next turn boundary.
 * `atTurn` (or `at_turn`) asserts which boundary that is; `continueParent` (or
 * `continue_parent`, default true) whether the rollout goes on after the fork.
 */
export const ForkRequestSchema = z
  .object({
    n: z.number().int().min(1),
    atTurn: z.number().int().min(0).optional(),
    at_turn: z.number().int().min(0).optional(),
    continueParent: z.boolean().optional(),
    continue_parent: z.boolean().optional(),
  })
  .strict();

/** The fork's answer (202): the branches are admitted and running. */
export const ForkResponseSchema = z.object({
  parent_id: z.string(),
  rollout_ids: z.array(z.string()),
  branch_turn: z.number().int(),
  prefix_id: z.string(),
  lost: z.array(z.string()),
  frozen_ms: z.number(),
});

/** A batch's `tree` (#26): each instance's n rollouts grow `width` branches at each of `branch_turns`. */
export const TreeBodySchema = z
  .object({
    branch_turns: z.array(z.number().int().min(0)).min(1).max(16),
    width: z.number().int().min(1).max(1024),
  })
  .strict();

/** One node of `GET /v1/groups/{id}/tree`. */
export const TreeNodeBodySchema = z.object({
  id: z.string(),
  parent_id: z.string().nullable(),
  branch_turn: z.number().int().nullable(),
  /** Assistant turns so far, the shared prefix's included. */
  turns: z.number().int(),
  state: RolloutStateSchema,
  outcome: OutcomeSchema.nullable(),
  finish: FinishReasonSchema.nullable(),
  reward: z.number().nullable(),
  children: z.array(z.string()),
});

/** `GET /v1/groups/{id}/tree`: a group's rollouts as a tree, and each branch point's reward statistics. */
export const TreeResponseSchema = z.object({
  group_id: z.string(),
  /** True once every node has ended. */
  complete: z.boolean(),
  roots: z.array(z.string()),
  nodes: z.array(TreeNodeBodySchema),
  branch_points: z.array(
    z.object({ parent_id: z.string(), turn: z.number().int(), children: z.array(z.string()), rewards: z.array(z.number().nullable()), mean: z.number().nullable(), std: z.number().nullable() }),
  ),
});
