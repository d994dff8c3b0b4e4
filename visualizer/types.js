// @ts-check
// The visualizer's shared JSDoc types (#29 §7): the Store's rollout records, the events and
// messages it folds in, and the listing and result bodies the page reads. No runtime code: a
// module imports them as `import('./types.js').RolloutRecord`.

/**
 * One rollout event as /v1/events sends it (camelCase; src/protocol/events.ts's RolloutEvent,
 * flattened: every field optional but the envelope's), with the fields the page reads.
 * @typedef {{
 *   type: string, rolloutId: string, seq?: number, ts?: number,
 *   dataSource?: string, instanceId?: string|null, groupId?: string|null, trajectoryId?: unknown,
 *   parentId?: string|null, branchTurn?: number|null, attempt?: number,
 *   state?: string, turn?: number, turns?: number,
 *   promptTokens?: number, outputTokens?: number, tokens?: number, latencyMs?: number, backendId?: string,
 *   outcome?: string, reward?: number|null, finish?: string|null,
 *   error?: boolean | SerializedError | null, // tool.result: whether it failed; retry, result: the error
 *   violations?: Record<string, number>|null,
 *   prev?: string|null, maxTokens?: number, finishReason?: string, content?: string,
 *   toolCalls?: Array<{ name: string, arguments: unknown }>,
 *   name?: string, callId?: string, arguments?: Record<string, unknown>, output?: string, exitCode?: number|null,
 *   [field: string]: unknown,
 * }} RolloutEvent
 */

/**
 * An error as the runtime serializes it.
 * @typedef {{ name?: string, message?: string, [field: string]: unknown }} SerializedError
 */

/**
 * A backend as the `backends` message lists it.
 * @typedef {{ id: string, state: string, inFlight: number, latencyMs: number|null }} BackendSnapshot
 */

/**
 * A message of /v1/events: the envelope around an event, a control message, or a bare event.
 * @typedef {{ type: string, event?: RolloutEvent, epoch?: string, seq?: number, ts?: number,
 *   from?: number, to?: number, reason?: string, backends?: BackendSnapshot[], rolloutId?: string,
 *   sub?: string, error?: { message?: string },
 *   [field: string]: unknown }} ServerMessage
 */

/**
 * One rollout as the page keeps it (Store#rollouts): folded from its events, or seeded from the
 * listing (`seeded`) when its events are past the server's retention.
 * @typedef {{
 *   id: string, dataSource: string, instanceId: string|null, groupId: string|null, trajectoryId: unknown,
 *   parentId?: string|null, branchTurn?: number|null,
 *   attempt: number, retries: number, state: string, turn: number, tokens: number,
 *   submittedTs: number, lastTs: number, stateTs: number, endTs: number|null,
 *   outcome: string|null, reward: number|null, finish: string|null, error: SerializedError|null,
 *   violations: Record<string, number>|null, elapsedKnown: boolean,
 *   events: RolloutEvent[], droppedEvents: number, version: number, rewardCounted: boolean,
 *   seeded?: boolean,
 * }} RolloutRecord
 */

/**
 * One rollout of `GET /v1/rollouts` (snake_case), as Store#seed reads it.
 * @typedef {{
 *   id: string, submitted_at?: number, data_source?: string, instance_id?: string|null,
 *   group_id?: string|null, trajectory_id?: unknown, parent_id?: string|null, branch_turn?: number|null,
 *   attempt?: number, turn?: number, tokens?: number, outcome?: unknown, state?: unknown,
 *   violations?: Record<string, number>|null, reward?: number|null, wall_ms?: unknown,
 *   [field: string]: unknown,
 * }} RolloutSummary
 */

/**
 * A GRPO group member (RewardStats#groups).
 * @typedef {{ id: string, trajectoryId: unknown, outcome: string|null, reward: number|null }} Member
 */

export {};
