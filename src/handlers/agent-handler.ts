/**
 * @deprecated The handler contract lives in `src/proxy/agent-contract.ts` (the lowest layer its
 * types need, so runtime, handlers and proxy all import it downward). This re-export keeps files
 * written before the move (on branches not yet merged) compiling; delete it once nothing imports it.
 */
export type * from '../proxy/agent-contract.js';
