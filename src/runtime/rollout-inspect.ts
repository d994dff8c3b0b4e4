import type { InspectionEvent, Observer } from 'xstate';
import type { InspectedRollout } from './inspection.js';

/** The `createActor` options that wire a rollout attempt's actor to the runtime's `inspect` option. */
export interface RolloutInspectOptions {
  /** The actor's id, which Stately's inspector shows as its name: `rollout <id>`. */
  id?: string;
  inspect?: Observer<InspectionEvent>;
}

/**
 * What a rollout attempt's `createActor` gets from the runtime's `inspect` option: nothing when
 * inspection is off or the inspector did not choose this rollout (so an unwatched actor costs
 * nothing), else the observer and an id naming the rollout (and its attempt after a retry), so
 * the inspector lists `rollout r-12` rather than a row of identical `rollout` actors.
 *
 * A plain observer watches every rollout; one with `forRollout` (from `createInspector`) is asked
 * per rollout.
 */
export function rolloutInspectOptions(inspect: unknown, rollout: InspectedRollout): RolloutInspectOptions {
  if (inspect === undefined || inspect === null) return {};
  const narrowing = inspect as { forRollout?: (r: InspectedRollout) => Observer<InspectionEvent> | undefined };
  const observer = typeof narrowing.forRollout === 'function' ? narrowing.forRollout(rollout) : (inspect as Observer<InspectionEvent>);
  if (observer === undefined) return {};
  const id = rollout.attempt > 1 ? `rollout ${rollout.rolloutId} (attempt ${rollout.attempt})` : `rollout ${rollout.rolloutId}`;
  return { id, inspect: observer };
}
