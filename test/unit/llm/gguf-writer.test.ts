import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { buildTinyGguf, ensureTinyGguf, ggufPreFor } from '../../../src/llm/gguf-writer.js';
import { FAMILIES } from '../../fixtures/model-families.js';
import { tinyTokenizerJson } from '../../fixtures/tiny-tokenizer.js';

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const dir = mkdtempSync(join(tmpdir(), 'gguf-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('buildTinyGguf', () => {
  const a = buildTinyGguf({ seed: 5, layers: 1 });

  it('writes the same bytes for the same seed', () => {
    expect(sha(buildTinyGguf({ seed: 5, layers: 1 }))).toBe(sha(a));
  });

  it('writes different weights for another seed', () => {
    expect(sha(buildTinyGguf({ seed: 6, layers: 1 }))).not.toBe(sha(a));
  });

  it('starts with the GGUF v3 header', () => {
    expect(a.subarray(0, 4).toString('latin1')).toBe('GGUF');
    expect(a.readUInt32LE(4)).toBe(3);
  });

  it('carries the Qwen3 vocabulary and chat template in its metadata', () => {
    const text = a.subarray(0, 8_000_000).toString('latin1');
    expect(text).toContain('tokenizer.ggml.merges');
    expect(text).toContain('<|im_end|>');
    expect(text).toContain("<|im_start|>assistant\\n");
  });
});

describe('ensureTinyGguf', () => {
  it('writes the model once into the cache folder and reuses it', () => {
    const p = ensureTinyGguf({ seed: 9 }, dir);
    expect(existsSync(p)).toBe(true);
    // Mark the file: a rewrite (even with the same bytes) would give a new mtime or inode.
    const marked = new Date(1_000_000_000_000);
    utimesSync(p, marked, marked);
    const before = statSync(p);
    expect(ensureTinyGguf({ seed: 9 }, dir)).toBe(p);
    const after = statSync(p);
    expect([after.ino, after.mtimeMs]).toEqual([before.ino, marked.getTime()]);
    expect(ensureTinyGguf({ seed: 10 }, dir)).not.toBe(p);
  });
});

describe('a tiny GGUF with another family vocabulary', () => {
  it('carries Llama 3.1 vocabulary, llama-bpe pre-tokenizer, its real template and <|eot_id|> as EOS', () => {
    const b = buildTinyGguf({ seed: 2, vocab: { dir: FAMILIES.llama3_1.dir, pre: 'llama-bpe' } });
    const text = b.subarray(0, 12_000_000).toString('latin1');
    expect(text).toContain('tiny-llama-bpe-vocab-seed2');
    expect(text).toContain('llama-bpe');
    expect(text).toContain('<|eot_id|>');
    expect(text).toContain('Environment: ipython');
  });

  it('recognises llama.cpp pre-tokenizer names from tokenizer.json split regexes', () => {
    const pre = (dir: string) => ggufPreFor(JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')) as object);
    expect(pre(FAMILIES.qwen3.dir)).toBe('qwen2');
    expect(pre(FAMILIES.llama3_1.dir)).toBe('llama-bpe');
    expect(pre(FAMILIES.deepseek_v3.dir)).toBe('deepseek-v3');
    expect(pre(FAMILIES.gemma3.dir)).toBeNull();
  });

  it('writes a SentencePiece-style vocabulary (Gemma 3) as llama.cpp\'s SPM model: scores, byte tokens, no space prefix', () => {
    const b = buildTinyGguf({ seed: 1, layers: 1, vocab: { dir: FAMILIES.gemma3.dir, pre: 'default' } });
    const text = b.subarray(0, 40_000_000).toString('latin1');
    // `<image_soft_token>` is an added token past the model's vocabulary (id 262144): it is written too.
    for (const key of ['tokenizer.ggml.scores', 'tokenizer.ggml.add_space_prefix', 'tokenizer.ggml.unknown_token_id', '<0x0A>', '<start_of_turn>', '<image_soft_token>']) expect(text).toContain(key);
    expect(text).not.toContain('tokenizer.ggml.merges');
    // The model name and pre come right after `tokenizer.ggml.model` / `.pre`: "llama" and "default".
    expect(text).toMatch(/tokenizer\.ggml\.model[\s\S]{12}llama/);
    expect(text).toMatch(/tokenizer\.ggml\.pre[\s\S]{12}default/);
  });

  it('refuses a vocabulary that is not BPE (WordPiece)', () => {
    const wp = join(dir, 'wordpiece');
    mkdirSync(wp, { recursive: true });
    const tj = tinyTokenizerJson(['<eos>']) as { model: Record<string, unknown> };
    tj.model.type = 'WordPiece';
    writeFileSync(join(wp, 'tokenizer.json'), JSON.stringify(tj));
    writeFileSync(join(wp, 'tokenizer_config.json'), JSON.stringify({ eos_token: '<eos>', chat_template: '{{ messages[0].content }}' }));
    expect(() => buildTinyGguf({ vocab: { dir: wp, pre: 'default' } })).toThrow(/tokenizer model WordPiece is not BPE/);
  });
});
