import type { BackendSpec } from '../llm/llm-client.js';
import { parseBackendAddress } from '../llm/backend-address.js';

/**
 * Parses a backend address as the service accepts it: everything `parseBackendAddress` of the
 * LLM area takes (`http://host:port`, `host:port`, `vllm+http://…`, `sglang+http://…`,
 * `prorl+http://…`, `?model=`), or `scripted` — the in-process oracle replay, whose spec has
 * `url: 'scripted:'` (see {@link ServiceLlm}). `extras` (from `POST /v1/backends`) override the
 * id, model and weight version. Throws ValidationError naming `address`.
 */
export function parseAddress(address: string, extras: { id?: string | undefined; model?: string | undefined; weightVersion?: string | number | null | undefined; codecKey?: string | undefined } = {}): BackendSpec {
  const a = address.trim();
  const over = {
    ...(extras.id !== undefined ? { id: extras.id } : {}),
    ...(extras.model !== undefined ? { model: extras.model } : {}),
    ...(extras.weightVersion !== undefined ? { weightVersion: extras.weightVersion } : {}),
    ...(extras.codecKey !== undefined ? { codecKey: extras.codecKey } : {}),
  };
  if (a === 'scripted') return { id: 'scripted', url: 'scripted:', protocol: 'prorl', ...over };
  return { ...parseBackendAddress(a), ...over };
}
