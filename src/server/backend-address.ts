import type { BackendSpec } from '../llm/llm-client.js';
import { parseBackendAddress } from '../llm/backend-address.js';

/**
 * Names of the built-in backends an address may name instead of a URL: the in-process oracle
 * replay (`oracle`; `scripted` is its older name). Their spec has `url: 'scripted:'` (see
 * {@link ServiceLlm}).
 */
export const BUILTIN_BACKENDS: ReadonlySet<string> = new Set(['oracle', 'scripted']);

/**
 * Parses a backend address as the service accepts it: a URL as `parseBackendAddress` of the LLM
 * area takes it (`http(s)://host:port[/path]`, `host:port`, an address ending in `/v1` for OpenAI
 * chat completions, `vllm+…`, `sglang+…`, `prorl+…`, `openai+…`, `?model=`), or the name of a
 * built-in backend ({@link BUILTIN_BACKENDS}). Anything else — `true`, `../../etc/passwd` — is
 * refused before it reaches the pool. `extras` (from `POST /v1/backends`) override the id, model
 * and weight version.
 * @throws ValidationError naming `address` (the routes answer 400).
 */
export function parseAddress(address: string, extras: { id?: string | undefined; model?: string | undefined; weightVersion?: string | number | null | undefined } = {}): BackendSpec {
  const a = typeof address === 'string' ? address.trim() : address;
  const over = {
    ...(extras.id !== undefined ? { id: extras.id } : {}),
    ...(extras.model !== undefined ? { model: extras.model } : {}),
    ...(extras.weightVersion !== undefined ? { weightVersion: extras.weightVersion } : {}),
  };
  if (BUILTIN_BACKENDS.has(a)) return { id: a, url: 'scripted:', protocol: 'prorl', ...over };
  return { ...parseBackendAddress(a), ...over };
}
