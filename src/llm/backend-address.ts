import { ValidationError } from '../errors.js';
import type { BackendSpec } from './llm-client.js';

const PROTOCOLS = new Set(['prorl', 'vllm', 'sglang']);

/**
 * Parses a backend address into a {@link BackendSpec}:
 * `http://h:p` or `h:p` (ProRL protocol, as the reference's `/add_llm_server` takes them),
 * `prorl+http://h:p`, `vllm+http://h:p`, `sglang+http://h:p`. A `model` query parameter sets
 * the model name for OpenAI-style routes (`vllm+http://h:p?model=qwen`). The id is `h:p`.
 * @throws ValidationError when the address is not one of these forms.
 */
export function parseBackendAddress(address: string): BackendSpec {
  let s = address.trim();
  let protocol: BackendSpec['protocol'] = 'prorl';
  const plus = /^([a-z]+)\+(https?:\/\/.*)$/i.exec(s);
  if (plus) {
    const p = plus[1]!.toLowerCase();
    if (!PROTOCOLS.has(p)) throw new ValidationError(`unknown backend protocol '${p}' in ${address}`, [{ path: 'address', message: `protocol must be prorl, vllm or sglang` }]);
    protocol = p as BackendSpec['protocol'];
    s = plus[2]!;
  } else if (/^[a-z][a-z0-9+.-]*:\/\//i.test(s) && !/^https?:\/\//i.test(s)) {
    // Without this, `ftp://x` would be read as the host `ftp` with the path `//x`.
    throw new ValidationError(`invalid backend address ${address}: unknown scheme`, [{ path: 'address', message: 'expected http://host:port or prorl+|vllm+|sglang+http://host:port' }]);
  } else if (!/^https?:\/\//i.test(s)) {
    s = `http://${s}`;
  }
  let url: URL;
  try {
    url = new URL(s);
  } catch {
    throw new ValidationError(`not a backend address: ${address}`, [{ path: 'address', message: 'expected http://host:port' }]);
  }
  if (url.protocol !== 'http:') throw new ValidationError(`only http backends are supported: ${address}`, [{ path: 'address', message: 'expected http://' }]);
  if (!url.hostname) throw new ValidationError(`no host in ${address}`, [{ path: 'address', message: 'expected http://host:port' }]);
  const model = url.searchParams.get('model') ?? undefined;
  const base = `http://${url.host}${url.pathname === '/' ? '' : url.pathname.replace(/\/$/, '')}`;
  return { id: url.host, url: base, protocol, ...(model ? { model } : {}) };
}
