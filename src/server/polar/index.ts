export { polarRoutes, type PolarApi, type PolarRouteOptions } from './polar-routes.js';
export { buildTraces, callsOf, type LlmCall } from './trace-builder.js';
export { toInstance, evalCommand, harborReward } from './task-instance.js';
export { toSessionResult } from './session-result.js';
export * from './polar-models.js';
