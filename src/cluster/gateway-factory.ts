import type { AgentHandler } from '../proxy/agent-contract.js';
import type { RuntimeFactory } from '../server/service-runtime.js';
import type { ClusterOptionsInput } from './cluster-options.js';
import { ClusterRuntime } from './cluster-runtime.js';

/**
 * The {@link RuntimeFactory} of `rollout serve --redis`: each call connects a fresh
 * {@link ClusterRuntime} (a ProRL `/stop` + `/start` reconnects; nothing in the cluster is
 * cancelled by it).
 */
export function clusterRuntimeFactory(options: ClusterOptionsInput, handlers: AgentHandler[] = []): RuntimeFactory {
  return () => ClusterRuntime.connect(options, { handlers });
}
