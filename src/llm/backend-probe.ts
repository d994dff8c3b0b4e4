import { RolloutError } from '../errors.js';
import { parseBackendAddress } from './backend-address.js';
import type { BackendSpec } from './llm-client.js';

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
  const out: BackendProbe = { address, spec: null, ok: false, reachable: false, kind: null, model: null, detail: '', suggestion: null, tokenizerMatches: null, slots: null };
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

  const fits = verdict(spec, out.kind, await protocolAnswer(spec, out.model, timeoutMs));
  const host = new URL(spec.url).host;
  const suggest: Record<ServerKind, string | null> = {
    vllm: `vllm+http://${host}`,
    sglang: `sglang+http://${host}`,
    openai: `http://${host}/v1`,
    unknown: null,
  };
  if (fits === true) {
    out.ok = true;
    out.slots = await engineSlots(origin, timeoutMs);
    out.detail = `${spec.protocol} at ${spec.url} answers${out.model ? ` (model ${out.model})` : ''}${out.kind !== 'unknown' ? `; the server looks like ${out.kind}` : ''}${out.slots !== null ? `; ${out.slots} slots` : ''}`;
  } else {
    out.suggestion = suggest[out.kind];
    const looks = out.kind === 'unknown' ? 'the server does not say what it is' : `this looks like ${out.kind === 'openai' ? 'an OpenAI-compatible server' : out.kind === 'vllm' ? 'vLLM' : 'SGLang'}`;
    out.detail = `the ${spec.protocol} route at ${spec.url} does not work (${fits}); ${looks}${out.suggestion ? `: use ${out.suggestion}` : ''}`;
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

/** The engine's parallel slots from `/props` (llama.cpp, llm-serve) or `/get_server_info` (SGLang), else null. */
async function engineSlots(origin: string, timeoutMs: number): Promise<number | null> {
  const positive = (x: unknown): number | null => (typeof x === 'number' && Number.isInteger(x) && x > 0 ? x : null);
  const props = await request(`${origin}/props`, timeoutMs).catch(() => null);
  const fromProps = props?.status === 200 ? positive(obj(props.body)?.['total_slots']) : null;
  if (fromProps !== null) return fromProps;
  const info = await request(`${origin}/get_server_info`, timeoutMs).catch(() => null);
  return info?.status === 200 ? positive(obj(info.body)?.['max_running_requests']) : null;
}

/**
 * Whether the address's protocol fits the server, from its answer to a one-token request: a 2xx
 * fits; a 404/405 means the route is not there; another 4xx means the route exists but refused
 * the probe's body (our fake wants a header, SGLang wants `input_ids`) — it fits unless the
 * server is recognisably another engine. True, or why not.
 */
export function verdict(spec: BackendSpec, kind: ServerKind, answer: number | string): true | string {
  if (typeof answer === 'string') return answer;
  if (answer >= 200 && answer < 300) return true;
  if (answer === 404 || answer === 405 || answer >= 500) return `HTTP ${answer}`;
  const other = (kind === 'vllm' || kind === 'sglang') && kind !== spec.protocol;
  return other ? `HTTP ${answer}` : true;
}

/** The HTTP status of the protocol's own route for a one-token request, or why there was none. */
async function protocolAnswer(spec: BackendSpec, model: string | null, timeoutMs: number): Promise<number | string> {
  let answer: Answer;
  try {
    switch (spec.protocol) {
      case 'prorl':
        answer = await request(`${spec.url}/generate`, timeoutMs, { prompt_ids: [1], max_tokens: 1, temperature: 0 });
        break;
      case 'vllm':
        answer = await request(`${spec.url}/v1/completions`, timeoutMs, { model: model ?? undefined, prompt: [1], max_tokens: 1, temperature: 0 });
        break;
      case 'sglang':
        answer = await request(`${spec.url}/generate`, timeoutMs, { input_ids: [1], sampling_params: { max_new_tokens: 1, temperature: 0 } });
        break;
      default:
        answer = await request(`${spec.url}/models`, timeoutMs);
        break;
    }
  } catch (err) {
    return reason(err, timeoutMs);
  }
  return answer.status;
}
