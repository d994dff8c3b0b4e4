import { readFileSync, realpathSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { ValidationError } from '../errors.js';
import { buildCodec, loadTokenizer, type HfChatCodec, type TextTokenizer } from './hf-codec.js';
import { createQwen3Codec } from './qwen3-codec.js';
import { TOOL_PARSER_NAMES } from './tool-parsers/index.js';

/** Which tokenizer and tool-call format a codec uses: what `--tokenizer` / `--tool-parser` name. */
export interface CodecSpec {
  /** A Hugging Face model directory; absent: Qwen3 (the default, shipped offline). */
  tokenizer?: string | undefined;
  /** A tool-call format name; absent: the one the template writes (else `hermes`, with a warning). */
  toolParser?: string | undefined;
}

/** The files of a Hugging Face model directory that a codec needs, parsed. */
export interface ModelDirFiles {
  /** The directory, as given. */
  dir: string;
  tokenizerJson: object;
  tokenizerConfig: Record<string, unknown>;
  /** `chat_template.jinja` when present (it wins, as in transformers), else the config's `chat_template`. */
  chatTemplate: string;
  /** The file the template came from, for error messages. */
  templateSource: string;
  /** `generation_config.json`'s `eos_token_id`s, when that file is present. */
  eosIds: number[];
}

// Bounds on what one file may hold: the largest real tokenizer.json (Gemma 3) is ~33 MB.
const MAX_TOKENIZER_BYTES = 256 << 20;
const MAX_CONFIG_BYTES = 16 << 20;

/**
 * Reads a model directory: `tokenizer.json`, `tokenizer_config.json` (special tokens and
 * `chat_template`, or a `chat_template.jinja` file beside it) and, when present,
 * `generation_config.json` (the EOS ids; without it the EOS token comes from the config).
 *
 * @throws ValidationError (field `tokenizer`) naming the file and what is wrong with it: a
 * missing directory or file, a file too big, JSON that does not parse, no chat template.
 */
export function readModelDir(dir: string): ModelDirFiles {
  const bad = (file: string, problem: string): ValidationError => new ValidationError(`tokenizer: ${file}: ${problem}`, [{ path: 'tokenizer', message: `${file}: ${problem}` }]);
  let st;
  try {
    st = statSync(dir);
  } catch {
    throw bad(dir, 'no such directory');
  }
  if (!st.isDirectory()) throw bad(dir, 'not a directory (give the model directory that holds tokenizer.json)');
  const read = (name: string, max: number, optional: boolean): string | undefined => {
    const file = join(dir, name);
    let s;
    try {
      s = statSync(file);
    } catch {
      if (optional) return undefined;
      throw bad(file, 'missing (a Hugging Face model directory has tokenizer.json and tokenizer_config.json)');
    }
    if (!s.isFile()) throw bad(file, 'not a regular file');
    if (s.size > max) throw bad(file, `${s.size} bytes, more than the ${max} allowed`);
    return readFileSync(file, 'utf8');
  };
  const json = (name: string, text: string): Record<string, unknown> => {
    let v: unknown;
    try {
      v = JSON.parse(text);
    } catch (e) {
      throw bad(join(dir, name), `not JSON: ${(e as Error).message}`);
    }
    if (typeof v !== 'object' || v === null || Array.isArray(v)) throw bad(join(dir, name), 'not a JSON object');
    return v as Record<string, unknown>;
  };
  const tokenizerJson = json('tokenizer.json', read('tokenizer.json', MAX_TOKENIZER_BYTES, false)!);
  const model = tokenizerJson.model as { type?: unknown; vocab?: unknown } | undefined;
  if (!model || typeof model !== 'object' || typeof model.vocab !== 'object') throw bad(join(dir, 'tokenizer.json'), 'has no "model" with a "vocab"');
  const tokenizerConfig = json('tokenizer_config.json', read('tokenizer_config.json', MAX_CONFIG_BYTES, false)!);
  const jinja = read('chat_template.jinja', MAX_CONFIG_BYTES, true);
  let chatTemplate: string;
  let templateSource: string;
  if (jinja !== undefined) {
    chatTemplate = jinja;
    templateSource = join(dir, 'chat_template.jinja');
  } else if (typeof tokenizerConfig.chat_template === 'string') {
    chatTemplate = tokenizerConfig.chat_template;
    templateSource = `${join(dir, 'tokenizer_config.json')} chat_template`;
  } else if (Array.isArray(tokenizerConfig.chat_template)) {
    // The older list form: [{name: 'default', template}, {name: 'tool_use', template}].
    const list = tokenizerConfig.chat_template as { name?: unknown; template?: unknown }[];
    const pick = list.find((t) => t.name === 'tool_use') ?? list.find((t) => t.name === 'default');
    if (typeof pick?.template !== 'string') throw bad(join(dir, 'tokenizer_config.json'), 'chat_template list has no "default" or "tool_use" template');
    chatTemplate = pick.template;
    templateSource = `${join(dir, 'tokenizer_config.json')} chat_template[${String(pick.name)}]`;
  } else throw bad(join(dir, 'tokenizer_config.json'), 'has no chat_template and there is no chat_template.jinja beside it');
  const gen = read('generation_config.json', MAX_CONFIG_BYTES, true);
  const eosIds: number[] = [];
  if (gen !== undefined) {
    const e = json('generation_config.json', gen).eos_token_id;
    for (const id of Array.isArray(e) ? e : e === undefined || e === null ? [] : [e]) {
      if (!Number.isInteger(id) || (id as number) < 0) throw bad(join(dir, 'generation_config.json'), `eos_token_id ${JSON.stringify(id)} is not a token id`);
      eosIds.push(id as number);
    }
  }
  return { dir, tokenizerJson, tokenizerConfig, chatTemplate, templateSource, eosIds };
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
  if (spec.tokenizer === undefined) codec = createQwen3Codec(spec.toolParser === undefined ? {} : { toolParser: spec.toolParser, onWarning: opts.onWarning });
  else {
    const dirKey = realDir(spec.tokenizer);
    let t = tokenizers.get(dirKey);
    if (!t) {
      const files = readModelDir(spec.tokenizer);
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
      codec = buildCodec(t.tok, {
        tokenizerJson: f.tokenizerJson,
        tokenizerConfig: f.tokenizerConfig,
        chatTemplate: f.chatTemplate,
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

function realDir(dir: string): string {
  try {
    return realpathSync(dir);
  } catch {
    throw new ValidationError(`tokenizer: ${dir}: no such directory`, [{ path: 'tokenizer', message: `${dir}: no such directory` }]);
  }
}
