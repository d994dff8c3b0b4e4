import { RolloutError } from '../errors.js';
import { parseBackendAddress } from './backend-address.js';
import type { BackendProtocol, BackendSpec } from './llm-client.js';

/** Which kind of server answered at an address, as far as its public routes tell. */
export type ServerKind = 'vllm' | 'sglang' | 'openai' | 'unknown';

/** What {@link probeBackend} found at one address. */
export interface BackendProbe {
  address: string;
  /** The parsed address, null when it did not parse. */
  spec: BackendSpec | null;
  /** The server answered and its declared protocol's route works. */
  ok: boolean;
  /** The server answered at all (false: refused, timed out, no such host). */
  reachable: boolean;
  kind: ServerKind | null;
  /** The model it serves, when it says (`/v1/models`). */
  model: string | null;
  /** One line for people: what was found, or what is wrong. */
  detail: string;
  /** The address to use instead, when the declared protocol does not fit the server. */
  suggestion: string | null;
  /** Tokenizer check against the server's own `/tokenize`: true / false, null when not checked. */
  tokenizerMatches: boolean | null;
  /**
   * Requests the engine evaluates at once, when it says: llama.cpp's server and `rollout
   * llm-serve` report `total_slots` at `GET /props`, SGLang `max_running_requests` at
   * `GET /get_server_info`. vLLM does not publish its `max_num_seqs`: null.
   */
  slots: number | null;
  /**
   * The engine's context window in tokens, when it says: vLLM's and SGLang's `/v1/models`
   * `max_model_len`, llama.cpp's (and `rollout llm-serve`'s) `/props`
   * `default_generation_settings.n_ctx`. Null when it does not (an OpenAI server).
   */
  contextLength: number | null;
}

/** Options of {@link probeBackend}. */
export interface ProbeOptions {
  /** Per request. Default 3,000 ms: a pre-flight must fail fast on a dead backend. */
  timeoutMs?: number;
  /** Encodes text as the runtime would; when given, compared with the server's `/tokenize`. */
  encode?: (text: string) => number[];
}

/** Text whose tokens differ between vocabularies: ASCII, CJK, an emoji and code. */
export const TOKENIZER_PROBE = 'Hello, world! 你好 🤖 def f(x): return x**2';

interface Answer {
  status: number;
  body: unknown;
}

async function request(url: string, timeoutMs: number, body?: unknown): Promise<Answer> {
  const res = await fetch(url, {
    method: body === undefined ? 'GET' : 'POST',
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON: keep the text
  }
  return { status: res.status, body: parsed };
}

/** Why a request failed, in a few words (`ECONNREFUSED`, `timed out after 3000 ms`, ...). */
function reason(err: unknown, timeoutMs: number): string {
  if (err instanceof Error && (err.name === 'TimeoutError' || err.name === 'AbortError')) return `timed out after ${timeoutMs} ms`;
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (err instanceof Error ? err.message : String(err));
}

const obj = (x: unknown): Record<string, unknown> | null => (x !== null && typeof x === 'object' && !Array.isArray(x) ? (x as Record<string, unknown>) : null);

/**
 * Probes one backend address before any rollout uses it: does the server answer, what kind of
 * server is it (vLLM, SGLang, another OpenAI-compatible one), does the address's protocol fit it
 * (a ProRL address at a vLLM server gets "use vllm+http://…"), which model it serves, and —
 * when `encode` is given and the server can tokenize — whether its tokenizer matches ours.
 * Never throws: every problem is in the answer's `detail`.
 */
export async function probeBackend(address: string, opts: ProbeOptions = {}): Promise<BackendProbe> {
  const timeoutMs = opts.timeoutMs ?? 3000;
  const out: BackendProbe = { address, spec: null, ok: false, reachable: false, kind: null, model: null, detail: '', suggestion: null, tokenizerMatches: null, slots: null, contextLength: null };
  let spec: BackendSpec;
  try {
    spec = parseBackendAddress(address);
  } catch (err) {
    out.detail = err instanceof RolloutError ? err.message : String(err);
    return out;
  }
  out.spec = spec;
  const origin = new URL(spec.url).origin;

  let models: Answer;
  try {
    models = await request(`${origin}/v1/models`, timeoutMs);
  } catch (err) {
    out.detail = `cannot reach ${origin}: ${reason(err, timeoutMs)}`;
    return out;
  }
  out.reachable = true;
  const data = obj(models.body)?.['data'];
  const first = Array.isArray(data) ? obj(data[0]) : null;
  if (models.status === 200 && first) {
    out.model = typeof first['id'] === 'string' ? first['id'] : null;
    out.kind = first['owned_by'] === 'vllm' ? 'vllm' : first['owned_by'] === 'sglang' ? 'sglang' : 'openai';
    out.contextLength = positiveInt(first['max_model_len']);
  }
  if (out.kind === null || out.kind === 'openai') {
    const info = await request(`${origin}/get_model_info`, timeoutMs).catch(() => null);
    const path = obj(info?.body)?.['model_path'];
    if (info?.status === 200 && typeof path === 'string') {
      out.kind = 'sglang';
      out.model ??= path;
    }
  }
  out.kind ??= 'unknown';

  // The protocol is judged by its own route answering a well-formed one-token request in its
  // own answer shape, never by what the server says it is: a fake or a proxy in front of vLLM
  // may not name itself. A 4xx on the declared route (it exists, but refused the probe's body:
  // our scripted fake wants a header) is a fit only when no other token protocol's route answers.
  const declared = await protocolAnswer(spec.protocol, spec.url, out.model, timeoutMs);
  let fits = verdict(spec.protocol, declared);
  const host = new URL(spec.url).host;
  if (fits !== true) {
    const alt = await answeringProtocol(spec.protocol, origin, out.model, timeoutMs);
    const refusedBody = typeof declared !== 'string' && declared.status >= 400 && declared.status < 500 && declared.status !== 404 && declared.status !== 405;
    if (refusedBody && (alt === null || alt === 'openai')) fits = true;
    else if (alt !== null) out.suggestion = alt === 'openai' ? `http://${host}/v1` : `${alt}+http://${host}`;
  }
  if (fits === true) {
    out.ok = true;
    const info = await engineInfo(origin, timeoutMs);
    out.slots = info.slots;
    out.contextLength ??= info.contextLength;
    const extras = [out.kind !== 'unknown' ? `the server looks like ${out.kind}` : null, out.slots !== null ? `${out.slots} slots` : null, out.contextLength !== null ? `context ${out.contextLength} tokens` : null];
    out.detail = `${spec.protocol} at ${spec.url} answers${out.model ? ` (model ${out.model})` : ''}${extras.filter(Boolean).map((x) => `; ${x}`).join('')}`;
  } else {
    const looks = out.kind === 'unknown' || out.kind === 'openai' ? null : `the server looks like ${out.kind === 'vllm' ? 'vLLM' : 'SGLang'}`;
    const next = out.suggestion ? `its ${out.suggestion.startsWith('http') ? 'openai' : out.suggestion.slice(0, out.suggestion.indexOf('+'))} route answers: use ${out.suggestion}` : 'no other protocol answers either';
    out.detail = `the ${spec.protocol} route at ${spec.url} does not work (${fits}); ${[looks, next].filter(Boolean).join('; ')}`;
  }

  if (opts.encode && out.ok) {
    const tok = await request(`${origin}/tokenize`, timeoutMs, { model: out.model ?? undefined, prompt: TOKENIZER_PROBE, add_special_tokens: false }).catch(() => null);
    const tokens = obj(tok?.body)?.['tokens'];
    if (tok?.status === 200 && Array.isArray(tokens)) {
      const ours = opts.encode(TOKENIZER_PROBE);
      out.tokenizerMatches = ours.length === tokens.length && ours.every((t, i) => t === tokens[i]);
      if (!out.tokenizerMatches) {
        out.ok = false;
        out.detail += `; its tokenizer differs from ours on a probe (${tokens.length} vs ${ours.length} tokens): pass the model's tokenizer`;
      }
    }
  }
  return out;
}

const positiveInt = (x: unknown): number | null => (typeof x === 'number' && Number.isInteger(x) && x > 0 ? x : null);

/**
 * The engine's parallel slots and context window: llama.cpp's server and `rollout llm-serve`
 * say both at `/props` (`total_slots`, `default_generation_settings.n_ctx`), SGLang its slots at
 * `/get_server_info` (`max_running_requests`); null where the server does not say.
 */
async function engineInfo(origin: string, timeoutMs: number): Promise<{ slots: number | null; contextLength: number | null }> {
  const props = await request(`${origin}/props`, timeoutMs).catch(() => null);
  const body = props?.status === 200 ? obj(props.body) : null;
  // llama.cpp's server nests it in its default settings; `rollout llm-serve` says it at the top.
  const contextLength = positiveInt(obj(body?.['default_generation_settings'])?.['n_ctx']) ?? positiveInt(body?.['n_ctx']);
  const fromProps = positiveInt(body?.['total_slots']);
  if (fromProps !== null) return { slots: fromProps, contextLength };
  const info = await request(`${origin}/get_server_info`, timeoutMs).catch(() => null);
  return { slots: info?.status === 200 ? positiveInt(obj(info.body)?.['max_running_requests']) : null, contextLength };
}

/** The protocols a mismatched address is checked against for a suggestion, most token-faithful first. */
const SUGGEST_ORDER: readonly BackendProtocol[] = ['vllm', 'sglang', 'prorl', 'openai'];

/**
 * Whether a protocol's own route answered a one-token request the way that protocol answers:
 * a 2xx whose body has the protocol's shape (ProRL `response_ids`, vLLM `choices`, SGLang
 * `meta_info`, OpenAI a model list). Any other status, or another shape, is no fit — whatever
 * the server calls itself. True, or why not.
 */
export function verdict(protocol: BackendProtocol, answer: { status: number; body: unknown } | string): true | string {
  if (typeof answer === 'string') return answer;
  if (answer.status < 200 || answer.status >= 300) return `HTTP ${answer.status}`;
  const b = obj(answer.body);
  const shaped =
    protocol === 'prorl' ? Array.isArray(b?.['response_ids'])
    : protocol === 'vllm' ? Array.isArray(b?.['choices'])
    : protocol === 'sglang' ? obj(b?.['meta_info']) !== null
    : Array.isArray(b?.['data']);
  return shaped ? true : `HTTP ${answer.status} without a ${protocol} answer`;
}

/** The first protocol other than `declared` whose own route answers in its shape, most token-faithful first; null when none does. */
async function answeringProtocol(declared: BackendProtocol, origin: string, model: string | null, timeoutMs: number): Promise<BackendProtocol | null> {
  for (const other of SUGGEST_ORDER) {
    if (other !== declared && verdict(other, await protocolAnswer(other, origin, model, timeoutMs)) === true) return other;
  }
  return null;
}

/** The answer of the protocol's own route at `base` to a well-formed one-token request, or why there was none. */
async function protocolAnswer(protocol: BackendProtocol, base: string, model: string | null, timeoutMs: number): Promise<Answer | string> {
  try {
    switch (protocol) {
      case 'prorl':
        return await request(`${base}/generate`, timeoutMs, { prompt_ids: [1], max_tokens: 1, temperature: 0 });
      case 'vllm':
        return await request(`${base}/v1/completions`, timeoutMs, { model: model ?? undefined, prompt: [1], max_tokens: 1, temperature: 0 });
      case 'sglang':
        return await request(`${base}/generate`, timeoutMs, { input_ids: [1], sampling_params: { max_new_tokens: 1, temperature: 0 } });
      default:
        return await request(`${base.endsWith('/v1') ? base : `${base}/v1`}/models`, timeoutMs);
    }
  } catch (err) {
    return reason(err, timeoutMs);
  }
}
