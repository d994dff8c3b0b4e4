import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { ValidationError } from '../errors.js';
import { isHarmonyVocab } from './harmony-codec.js';

/** The files of a Hugging Face model directory that a codec needs, parsed. */
export interface ModelDirFiles {
  /** The directory, as given. */
  dir: string;
  tokenizerJson: object;
  tokenizerConfig: Record<string, unknown>;
  /**
   * `chat_template.jinja` when present (it wins, as in transformers), else the config's
   * `chat_template`; undefined only for a harmony (gpt-oss) vocabulary, which is rendered
   * natively (harmony-codec.ts) and needs none.
   */
  chatTemplate: string | undefined;
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
 * `chat_template`, or a `chat_template.jinja` file beside it; a harmony vocabulary needs
 * neither) and, when present,
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
  let chatTemplate: string | undefined;
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
  } else if (isHarmonyVocab(tokenizerJson)) {
    chatTemplate = undefined;
    templateSource = `${join(dir, 'tokenizer.json')} (harmony, rendered natively)`;
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
