import { readFileSync, realpathSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { ValidationError } from '../errors.js';
import { buildCodec, checkChatTemplate, loadTokenizer, type HfChatCodec, type TextTokenizer } from './hf-codec.js';
import { ggufPreFor, type GgufVocabSource } from './gguf-writer.js';
import { createHarmonyCodec, isHarmonyVocab } from './harmony-codec.js';
import { parseBackendAddress } from './backend-address.js';
import type { ChatCodec } from './chat-codec.js';
import { isOracleAddress } from './oracle-backend.js';
import { readModelDir, type ModelDirFiles } from './model-dir.js';
import { createQwen3Codec } from './qwen3-codec.js';
import { TOOL_PARSER_NAMES } from './tool-parsers/index.js';

/** Which tokenizer and tool-call format a codec uses: what `--tokenizer` / `--tool-parser` name. */
export interface CodecSpec {
  /** A Hugging Face model directory; absent: Qwen3 (the default, shipped offline). */
  tokenizer?: string | undefined;
  /** A tool-call format name; absent: the one the template writes (else `hermes`, with a warning). */
  toolParser?: string | undefined;
}

const tokenizers = new Map<string, { files: ModelDirFiles; tok: TextTokenizer }>();
const codecs = new Map<string, HfChatCodec>();

/**
 * The key two specs share exactly when they give the same codec: `qwen3` or the directory's
 * real path, plus the tool parser. Backends serving different keys serve different models.
 * @throws ValidationError when the directory does not exist.
 */
export function codecKey(spec: CodecSpec): string {
  const base = spec.tokenizer === undefined ? 'qwen3' : realDir(spec.tokenizer);
  return spec.toolParser === undefined ? base : `${base}#${spec.toolParser}`;
}

/**
 * The codec for a spec, made once per process per {@link codecKey} (the tokenizer, the slow
 * part, once per directory): every surface naming the same directory shares it.
 *
 * @throws ValidationError naming the file and problem when the directory is not a usable model
 * directory, the template does not parse or render, or the tool parser is unknown.
 */
export function codecFor(spec: CodecSpec = {}, opts: { onWarning?: (message: string) => void } = {}): HfChatCodec {
  if (spec.toolParser !== undefined && !TOOL_PARSER_NAMES.includes(spec.toolParser)) {
    throw new ValidationError(`tool parser: unknown "${spec.toolParser}"; known: ${TOOL_PARSER_NAMES.join(', ')}`, [{ path: 'toolParser', message: `unknown "${spec.toolParser}"` }]);
  }
  const key = codecKey(spec);
  const hit = codecs.get(key);
  if (hit) return hit;
  let codec: HfChatCodec;
  if (spec.tokenizer === undefined) {
    try {
      codec = createQwen3Codec(spec.toolParser === undefined ? {} : { toolParser: spec.toolParser, onWarning: opts.onWarning });
    } catch (e) {
      throw new ValidationError(`tool parser: ${(e as Error).message}`, [{ path: 'toolParser', message: (e as Error).message }]);
    }
  } else {
    const dirKey = realDir(spec.tokenizer);
    let t = tokenizers.get(dirKey);
    if (!t) {
      const files = readModelDir(spec.tokenizer);
      // A template our Jinja cannot parse fails here, before the (seconds-long) tokenizer load.
      try {
        if (files.chatTemplate !== undefined) checkChatTemplate(files.chatTemplate, files.templateSource);
      } catch (e) {
        throw new ValidationError(`tokenizer: ${(e as Error).message}`, [{ path: 'tokenizer', message: (e as Error).message }]);
      }
      let tok: TextTokenizer;
      try {
        tok = loadTokenizer(files.tokenizerJson, files.tokenizerConfig);
      } catch (e) {
        throw new ValidationError(`tokenizer: ${join(spec.tokenizer, 'tokenizer.json')}: cannot be loaded: ${(e as Error).message}`, [{ path: 'tokenizer', message: (e as Error).message }]);
      }
      t = { files, tok };
      tokenizers.set(dirKey, t);
    }
    const f = t.files;
    try {
      if (isHarmonyVocab(f.tokenizerJson)) codec = harmonyCodec(t.tok, f, spec, dirKey);
      else codec = buildCodec(t.tok, {
        tokenizerJson: f.tokenizerJson,
        tokenizerConfig: f.tokenizerConfig,
        chatTemplate: f.chatTemplate!,
        templateSource: f.templateSource,
        extraStopIds: f.eosIds,
        toolParser: spec.toolParser,
        onWarning: opts.onWarning,
        name: `hf:${dirKey}`,
      });
    } catch (e) {
      throw new ValidationError(`tokenizer: ${(e as Error).message}`, [{ path: 'tokenizer', message: (e as Error).message }]);
    }
  }
  codecs.set(key, codec);
  return codec;
}

/**
 * gpt-oss: harmony rendered natively whatever the directory's template says (vLLM renders
 * gpt-oss chats with the harmony library, not the template), its tool calls read by `openai`.
 * @throws Error when another tool parser is named: harmony's calls are in no other format.
 */
function harmonyCodec(tok: TextTokenizer, f: ModelDirFiles, spec: CodecSpec, dirKey: string): HfChatCodec {
  if (spec.toolParser !== undefined && spec.toolParser !== 'openai') throw new Error(`${join(f.dir, 'tokenizer.json')} is a harmony (gpt-oss) vocabulary: its tool calls are read by the openai tool parser, not ${spec.toolParser}`);
  return createHarmonyCodec(tok, { extraStopIds: f.eosIds, name: `hf:${dirKey}` });
}

/** A Hugging Face hub name (`org/name`), not a path. */
const HUB_NAME = /^[A-Za-z0-9][\w.-]*\/[A-Za-z0-9][\w.-]*$/;

/** True when a tokenizer reference is a hub name (`Qwen/Qwen3-8B`); anything else is a path. */
export function isHubName(ref: string): boolean {
  return HUB_NAME.test(ref);
}

/**
 * The model directory a job's `custom_tokenizer` names (the reference's per-job field): a path
 * (absolute, or relative starting `./`), or a hub name (`Qwen/Qwen3-8B`) found in the
 * local Hugging Face cache the way transformers finds it offline
 * (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`;
 * `models--ORG--NAME/snapshots/<refs/main>`). Nothing is downloaded.
 * @throws ValidationError (field `field`) when a hub name is not in the cache.
 */
export function resolveTokenizerRef(ref: string, field = 'custom_tokenizer', env: NodeJS.ProcessEnv = process.env): string {
  // `org/name` is always a hub name, never a directory under the working directory (transformers
  // would try one first): over the API only paths confined to the path roots may name a directory.
  if (isAbsolute(ref) || !isHubName(ref)) return ref;
  const cache = env.HF_HUB_CACHE ?? (env.HF_HOME ? join(env.HF_HOME, 'hub') : join(homedir(), '.cache', 'huggingface', 'hub'));
  const repo = join(cache, `models--${ref.replace('/', '--')}`);
  let rev: string | undefined;
  try {
    rev = readFileSync(join(repo, 'refs', 'main'), 'utf8').trim();
  } catch {
    rev = undefined;
  }
  const snap = rev ? join(repo, 'snapshots', rev) : undefined;
  if (snap && isDir(snap)) return snap;
  const msg = `${ref}: not a directory, and not in the Hugging Face cache (${repo}); nothing is downloaded: give a model directory, or fetch the model into the cache first`;
  throw new ValidationError(`${field}: ${msg}`, [{ path: field, message: msg }]);
}

function isDir(p: string): boolean {
  try {
    return statSync(p).isDirectory();
  } catch {
    return false;
  }
}

function realDir(dir: string): string {
  try {
    return realpathSync(dir);
  } catch {
    throw new ValidationError(`tokenizer: ${dir}: no such directory`, [{ path: 'tokenizer', message: `${dir}: no such directory` }]);
  }
}

/**
 * Text whose ids tell two vocabularies apart: words, digits, code, whitespace runs and several
 * scripts, so a tokenizer that differs anywhere that matters differs here.
 */
export const VOCAB_PROBE = "The quick brown fox (v1.2.3) can't jump 12345 times;\n\tdef f(x): return x**2  # ok\nÜber naïve café — 日本語 中文 한국어 Привет 🤖\n\n";

/**
 * Checks that `codec` tokenizes as an engine does, by encoding {@link VOCAB_PROBE} with both.
 * @throws ValidationError (field `tokenizer`) naming `where` and the first differing position.
 */
export function verifyVocab(codec: Pick<ChatCodec, 'name' | 'encode'>, engineIds: readonly number[], where: string): void {
  const ours = codec.encode(VOCAB_PROBE);
  let i = 0;
  while (i < ours.length && i < engineIds.length && ours[i] === engineIds[i]) i++;
  if (i === ours.length && i === engineIds.length) return;
  const msg = `${codec.name} does not tokenize as ${where}: a probe text gives id ${ours[i] ?? 'none'} here and ${engineIds[i] ?? 'none'} there at position ${i} (a different vocabulary; give the model's own tokenizer directory)`;
  throw new ValidationError(`tokenizer: ${msg}`, [{ path: 'tokenizer', message: msg }]);
}

/**
 * Asks a backend for the ids of {@link VOCAB_PROBE} (`POST /tokenize`, vLLM's route, which
 * `rollout llm-serve` also serves) and checks them against `codec`. Resolves `false` when the
 * backend cannot tokenize (no such route), `true` when it agrees.
 * @throws ValidationError when the backend tokenizes differently.
 */
export async function verifyBackendVocab(url: string, codec: Pick<ChatCodec, 'name' | 'encode'>, opts: { model?: string | undefined; timeoutMs?: number } = {}): Promise<boolean> {
  let res: Response;
  try {
    res = await fetch(new URL('/tokenize', url), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: VOCAB_PROBE, add_special_tokens: false, ...(opts.model ? { model: opts.model } : {}) }),
      signal: AbortSignal.timeout(opts.timeoutMs ?? 10_000),
    });
  } catch {
    return false;
  }
  if (!res.ok) {
    await res.body?.cancel();
    return false;
  }
  const body = (await res.json().catch(() => null)) as { tokens?: unknown } | null;
  if (!body || !Array.isArray(body.tokens) || !body.tokens.every((t) => Number.isInteger(t))) return false;
  verifyVocab(codec, body.tokens as number[], `the backend at ${url}`);
  return true;
}

/**
 * The vocabulary source for a tiny GGUF carrying a model directory's tokenizer
 * (`llm-serve --tiny --tokenizer DIR`), its llama.cpp pre-tokenizer recognised from tokenizer.json.
 * @throws ValidationError when the directory is unusable or its pre-tokenizer is not one llama.cpp names.
 */
export function tinyVocabFor(dir: string): GgufVocabSource {
  const files = readModelDir(dir);
  // SentencePiece-style (byte fallback, no split regex): llama.cpp's SPM tokenizer, pre `default`.
  const spm = (files.tokenizerJson as { model?: { byte_fallback?: unknown } }).model?.byte_fallback === true;
  const pre = spm ? 'default' : ggufPreFor(files.tokenizerJson);
  if (!pre) throw new ValidationError(`tokenizer: ${join(dir, 'tokenizer.json')}: its pre-tokenizer is not one the tiny GGUF writer knows (qwen2, llama-bpe, deepseek-v3, gpt-4o, or SentencePiece-style with byte fallback)`, [{ path: 'tokenizer', message: 'unknown pre-tokenizer' }]);
  return { dir, pre };
}

/**
 * Loads the codec for `spec` and checks it against an engine's own tokenizer: the error text
 * (the file and the problem) or null when they agree. For start-up checks that print and exit.
 */
export function checkEngineTokenizer(spec: CodecSpec, tokenize: (text: string) => number[], where: string): string | null {
  try {
    verifyVocab(codecFor(spec), tokenize(VOCAB_PROBE), where);
    return null;
  } catch (e) {
    return (e as Error).message;
  }
}

/**
 * What a backend registration (`/add_llm_server`, `/v1/backends`) needs: with a `tokenizer`, the
 * codec key that routes only that model's rollouts to it, after checking the tokenizer against
 * the backend's own (`POST /tokenize`) where the backend can tokenize. Without one the backend
 * serves the service's own model (the service keys it so when it applies it), tokenized with
 * `serviceCodec` (the runtime's): that codec is checked the same way, so a backend of another
 * model registered without its tokenizer is refused instead of sampling from ids of the wrong
 * vocabulary. Undefined key without a tokenizer; nothing is checked for the `scripted` and
 * `oracle` addresses, or a backend that cannot tokenize.
 * @throws ValidationError naming the file and problem for an unusable directory or tool parser,
 * or naming the backend when its vocabulary differs.
 */
export async function backendCodecKey(address: string, spec: CodecSpec & { model?: string | undefined }, serviceCodec?: Pick<ChatCodec, 'name' | 'encode'>): Promise<string | undefined> {
  const codec = spec.tokenizer === undefined ? undefined : codecFor({ tokenizer: spec.tokenizer, toolParser: spec.toolParser });
  if (codec === undefined && spec.toolParser !== undefined) codecFor({ toolParser: spec.toolParser });
  const checked = codec ?? serviceCodec;
  const bare = address.trim();
  if (checked && bare !== 'scripted' && !isOracleAddress(bare)) {
    let url: string | null = null;
    try {
      url = parseBackendAddress(address).url;
    } catch {
      // The address is the registration's own error to report, with its own field.
    }
    if (url !== null) {
      try {
        await verifyBackendVocab(url, checked, { model: spec.model, timeoutMs: codec ? 10_000 : 3_000 });
      } catch (err) {
        if (codec || !(err instanceof ValidationError)) throw err;
        const msg = `the backend at ${url} does not tokenize as this service's tokenizer (${checked.name}): register it with its model's tokenizer directory (tokenizer)`;
        throw new ValidationError(`tokenizer: ${msg}`, [{ path: 'tokenizer', message: msg }]);
      }
    }
  }
  return codec?.name;
}
