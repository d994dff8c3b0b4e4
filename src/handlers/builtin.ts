import type { AgentHandler } from './agent-handler.js';

/**
 * The task handlers a runtime registers by default (math, code, swe, stem, shell). Filled by
 * the service issue; users add their own with the `handlers` option.
 */
export const builtinHandlers: AgentHandler[] = [];
