/**
 * @deprecated The clock lives on the ground floor now: import from `src/clock.ts`. This re-export
 * keeps runtime files written before the move (on branches not yet merged) compiling; delete it
 * once nothing imports it.
 */
export * from '../clock.js';
