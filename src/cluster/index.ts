export { ClusterRuntime, type ClusterGatewayParts, type ClusterRolloutHandle } from './cluster-runtime.js';
export { ClusterWorker, type ClusterWorkerParts } from './cluster-worker.js';
export { clusterRuntimeFactory } from './gateway-factory.js';
export { ClusterOptionsSchema, parseClusterOptions, type ClusterOptions, type ClusterOptionsInput } from './cluster-options.js';
