import type { ExternalAgent } from './agent-contract.js';
import type { ProxyChatCall } from './llm-proxy.js';
import type { SegmentedTrajectory } from './segmented-trajectory.js';

/** One attempt's harness state: the agent, its token record, the request the loop holds. */
export class HarnessRun {
  /** A chat request taken by `act`, sampled by the next `llm` step. */
  pending: ProxyChatCall | null = null;
  /** Chat requests answered. */
  calls = 0;
  /** The harness's exit code once it exited by itself. */
  exitCode: number | null | undefined = undefined;
  readonly maxLlmCalls: number;

  constructor(
    readonly agent: ExternalAgent,
    readonly traj: SegmentedTrajectory,
    maxIterations: number,
  ) {
    this.maxLlmCalls = agent.limits.maxLlmCalls ?? maxIterations;
  }
}

