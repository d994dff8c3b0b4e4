import type { BackendSpec } from '../llm/llm-client.js';
import { parseBackendAddress } from '../llm/backend-address.js';
import { isOracleAddress, oracleSpec } from '../llm/oracle-backend.js';

/**
 * Parses a backend address as the service accepts it: everything `parseBackendAddress` of the
 * LLM area takes (`http://host:port`, `host:port`, `vllm+http://…`, `sglang+http://…`,
 * `prorl+http://…`, `openai+…`, an address ending in `/v1` for OpenAI chat completions, `?model=`), or `oracle` — the in-process oracle replay, whose spec has
 * `url: 'oracle:'` (see {@link ServiceLlm}). `extras` (from `POST /v1/backends`) override the
 * id, model and weight version. Anything else (`true`, `../../etc/passwd`) is refused before it reaches the pool.
 * @throws ValidationError naming `address` (the routes answer 400).
 */
export function parseAddress(address: string, extras: { id?: string | undefined; model?: string | undefined; weightVersion?: string | number | null | undefined; codecKey?: string | undefined } = {}): BackendSpec {
  const a = typeof address === 'string' ? address.trim() : address;
  const over = {
    ...(extras.id !== undefined ? { id: extras.id } : {}),
    ...(extras.model !== undefined ? { model: extras.model } : {}),
    ...(extras.weightVersion !== undefined ? { weightVersion: extras.weightVersion } : {}),
    ...(extras.codecKey !== undefined ? { codecKey: extras.codecKey } : {}),
  };
  if (isOracleAddress(a)) return oracleSpec(over);
  return { ...parseBackendAddress(a), ...over };
}
