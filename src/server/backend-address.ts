import type { BackendSpec } from '../llm/llm-client.js';
import { ValidationError } from '../errors.js';

/**
 * Parses a backend address as the service accepts it: `http://host:port` (ProRL protocol),
 * `vllm+http://…`, `sglang+http://…`, `prorl+http://…`, or `scripted` (the in-process oracle
 * replay; its spec has `url: 'scripted:'` and the runtime's pool routes it to the scripted
 * policy). Throws ValidationError on anything else, naming `address`.
 */
export function parseAddress(address: string, extras: { id?: string | undefined; model?: string | undefined; weightVersion?: string | number | null | undefined } = {}): BackendSpec {
  const a = address.trim();
  const base = {
    ...(extras.id !== undefined ? { id: extras.id } : {}),
    ...(extras.model !== undefined ? { model: extras.model } : {}),
    ...(extras.weightVersion !== undefined ? { weightVersion: extras.weightVersion } : {}),
  };
  if (a === 'scripted') return { id: extras.id ?? 'scripted', url: 'scripted:', protocol: 'prorl', ...base };
  const m = /^(?:(prorl|vllm|sglang)\+)?(https?:\/\/.+)$/i.exec(a);
  let url: URL | null = null;
  if (m) {
    try {
      url = new URL(m[2]!);
    } catch {
      url = null;
    }
  }
  if (!m || !url || !url.hostname) {
    throw new ValidationError(`invalid backend address '${a.slice(0, 200)}'`, [
      { path: 'address', message: "expected 'http://host:port', 'vllm+http://…', 'sglang+http://…' or 'scripted'" },
    ]);
  }
  const protocol = (m[1]?.toLowerCase() ?? 'prorl') as BackendSpec['protocol'];
  return { url: url.origin + url.pathname.replace(/\/$/, ''), protocol, ...base };
}
