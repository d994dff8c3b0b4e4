export { createService, RolloutService, type ServiceDeps } from './service.js';
export { parseServiceOptions, ServiceOptionsSchema, type ServiceOptions, type ServiceOptionsInput } from './service-options.js';
export type { ServiceRuntime, RuntimeFactory, BackendControl } from './service-runtime.js';
export type { VisualizerHook } from './http-server.js';
export { toProrlResult } from './prorl-result.js';
export { parseAddress } from './service-address.js';
export { buildOpenApi } from './openapi.js';
export { serviceRuntimeFactory, type ServiceRuntimeParts } from './runtime-factory.js';
export { ServiceLlm } from './service-llm.js';
