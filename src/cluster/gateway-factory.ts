import type { AgentHandler } from '../proxy/agent-contract.js';
import type { RuntimeFactory } from '../server/service-runtime.js';
import type { ClusterOptionsInput } from './cluster-options.js';
import { ClusterRuntime } from './cluster-runtime.js';
import { withRedisPassword } from './redis-connection.js';

/**
 * The {@link RuntimeFactory} of `rollout serve --redis`: each call connects a fresh
 * {@link ClusterRuntime} (a ProRL `/stop` + `/start` reconnects; nothing in the cluster is
 * cancelled by it). A URL without a password takes it from `env`'s `REDIS_PASSWORD` or the file
 * `REDIS_PASSWORD_FILE` names ({@link withRedisPassword}), so it need not be in argv.
 * @throws ValidationError when the password file cannot be read (at the call, before connecting).
 */
export function clusterRuntimeFactory(options: ClusterOptionsInput, handlers: AgentHandler[] = [], env: NodeJS.ProcessEnv = process.env): RuntimeFactory {
  const redis = typeof options.redis === 'string' ? withRedisPassword(options.redis, { env }) : options.redis;
  return () => ClusterRuntime.connect({ ...options, redis }, { handlers });
}
