import { ValidationError } from '../errors.js';
import type { BackendProtocol, BackendSpec } from './llm-client.js';
import { PROTOCOL_NAMES } from './protocols/index.js';

const FORMS = 'expected http(s)://host:port[/path], host:port, or prorl+|vllm+|sglang+|openai+http(s)://host:port';

/** `host:port[/path][?query]` without a scheme: a DNS name, IPv4 or bracketed IPv6, and a port. */
const BARE = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*):\d{1,5}(?:\/[^\s?#]*)?(?:\?[^\s#]*)?$/;

function bad(address: string, why: string): ValidationError {
  // Shown bounded and without control characters: the address is an API client's input.
  const clean = address.replace(/[\u0000-\u001f\u007f]/g, '?');
  const shown = clean.length > 200 ? `${clean.slice(0, 200)}…` : clean;
  return new ValidationError(`invalid backend address ${shown}: ${why}`, [{ path: 'address', message: `${why}; ${FORMS}` }]);
}

/**
 * Parses a backend address into a {@link BackendSpec}.
 *
 * - `http://h:p` or `h:p` → ProRL `/generate` (as the reference's `/add_llm_server` takes them);
 * - an address whose path ends in `/v1` (`http://h:p/v1`, as NeMo Gym registers) → `openai`
 *   chat completions at that base;
 * - `prorl+`, `vllm+`, `sglang+`, `openai+` before `http://` or `https://` name the protocol.
 *   `vllm+http://h:p/v1` and `sglang+http://h:p/v1` mean the server at `http://h:p` (their
 *   routes already start at the root: no `/v1/v1/…`); `openai+http://h:p` gets the base `/v1`.
 *
 * Query parameters: `model=NAME` (the model name of OpenAI-style routes), `logprobs=raw|processed`
 * (what the server's logprobs mean, when it is not the protocol's default). The id is `host:port`
 * plus the base path when there is one (`h:p/v1`): two paths on one host:port are two backends.
 *
 * @throws ValidationError (field `address`) for anything else: an unknown scheme or protocol
 * prefix, no host, a bare word (`true`), a file path (`../../etc/passwd`), credentials in the URL.
 */
export function parseBackendAddress(address: string): BackendSpec {
  if (typeof address !== 'string') throw bad(String(address), 'not a string');
  const s0 = address.trim();
  if (s0 === '') throw bad(address, 'empty');
  let s = s0;
  let explicit: BackendProtocol | undefined;
  const plus = /^([a-z][a-z0-9]*)\+([a-z][a-z0-9+.-]*:\/\/.*)$/i.exec(s);
  if (plus) {
    const p = plus[1]!.toLowerCase();
    if (!(PROTOCOL_NAMES as readonly string[]).includes(p)) throw bad(address, `unknown backend protocol '${p}' (protocol must be ${PROTOCOL_NAMES.join(', ')})`);
    explicit = p as BackendProtocol;
    s = plus[2]!;
  }
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(s)) {
    // Without this, `ftp://x` would be read as the host `ftp` with the path `//x`.
    if (!/^https?:\/\//i.test(s)) throw bad(address, 'unknown scheme');
  } else if (explicit === undefined && BARE.test(s)) {
    s = `http://${s}`;
  } else {
    throw bad(address, 'not a URL or host:port');
  }
  let url: URL;
  try {
    url = new URL(s);
  } catch {
    throw bad(address, 'not a URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw bad(address, 'unknown scheme');
  if (!url.hostname) throw bad(address, 'no host');
  if (url.username || url.password) throw bad(address, 'credentials in the URL are not accepted');
  if (url.hash) throw bad(address, 'a fragment is not part of a backend address');
  let path = url.pathname.replace(/\/+$/, '');
  const protocol: BackendProtocol = explicit ?? (/\/v1$/.test(path) ? 'openai' : 'prorl');
  // vLLM's `/v1/completions` and SGLang's `/generate` are routed from the server root.
  if ((protocol === 'vllm' || protocol === 'sglang') && /\/v1$/.test(path)) path = path.slice(0, -3);
  if (protocol === 'openai' && path === '') path = '/v1';
  const model = url.searchParams.get('model') ?? undefined;
  const lp = url.searchParams.get('logprobs');
  if (lp !== null && lp !== 'raw' && lp !== 'processed') throw bad(address, `logprobs=${lp.slice(0, 40)}: expected raw or processed`);
  return {
    id: `${url.host}${path}`,
    url: `${url.protocol}//${url.host}${path}`,
    protocol,
    ...(model ? { model } : {}),
    ...(lp ? { logprobSemantics: lp } : {}),
  };
}
