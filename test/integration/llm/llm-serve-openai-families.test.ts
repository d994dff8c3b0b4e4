import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { codecFor } from '../../../src/llm/codec-registry.js';
import { ensureTinyGguf } from '../../../src/llm/gguf-writer.js';
import type { HfChatCodec } from '../../../src/llm/hf-codec.js';
import type { LlamaSample } from '../../../src/llm/llama-engine.js';
import type { Message, ToolSchema } from '../../../src/protocol/messages.js';
import { FAMILIES } from '../../fixtures/model-families.js';
import { startLlmServeProcess, stopServerProcesses, type ServerProcess } from '../../helpers/server-process.js';

// `llm-serve --tokenizer DIR`'s OpenAI chat route renders the messages with that model
// directory's template and tokenizer and parses the reply with its codec (#28: it used Qwen3's
// for every model — Llama 3.1 answered HTTP 500, Gemma 3 sampled from Qwen3 ids). Real engines
// (node-llama-cpp, tiny GGUFs of each vocabulary): two families, one server each.

const RUN = [FAMILIES.llama3_1, FAMILIES.gemma3];
const TOOLS: ToolSchema[] = [{ type: 'function', function: { name: 'execute_bash', description: 'Run a shell command.', parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] } } }];

describe('llm-serve --tiny --tokenizer DIR: OpenAI chat completions in the model directory’s vocabulary and template', () => {
  const servers = new Map<string, ServerProcess>();
  const codecs = new Map<string, HfChatCodec>();

  beforeAll(async () => {
    for (const f of RUN) {
      codecs.set(f.name, codecFor({ tokenizer: f.dir }, { onWarning: () => undefined }));
      ensureTinyGguf({ seed: 1, vocab: { dir: f.dir, pre: f.pre! } });
    }
    const started = await Promise.all(RUN.map((f) => startLlmServeProcess(['--tiny', '--tokenizer', f.dir, '--protocol', 'openai', '--port', '0', '--parallel', '1'])));
    RUN.forEach((f, i) => servers.set(f.name, started[i]!));
  }, 240_000);

  afterAll(async () => {
    await stopServerProcesses();
  });

  const chat = async (family: string, body: Record<string, unknown>) => {
    const res = await fetch(`${servers.get(family)!.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    return { status: res.status, body: (await res.json()) as any };
  };
  const lastSample = async (family: string): Promise<LlamaSample> => {
    const s = ((await (await fetch(`${servers.get(family)!.url}/debug/samples`)).json()) as { samples: LlamaSample[] }).samples;
    return s.at(-1)!;
  };

  for (const f of RUN) {
    describe(f.name, () => {
      it('renders the prompt with the family’s template and tokenizer, and samples in its vocabulary', async () => {
        const codec = codecs.get(f.name)!;
        const messages: Message[] = [
          { role: 'user', content: 'List the files, please.' },
          { role: 'assistant', content: 'Sure.' },
          { role: 'user', content: 'Go on.' },
        ];
        const tools = f.tools ? TOOLS : [];
        const r = await chat(f.name, { messages, ...(f.tools ? { tools } : {}), max_tokens: 4, seed: 7, temperature: 1, logprobs: true, return_token_ids: true });
        expect(r.status).toBe(200);
        const expected = codec.encodePrompt(messages, tools);
        expect(r.body.prompt_token_ids).toEqual(expected);
        // The engine was given those ids, and what it sampled is what the answer says.
        const s = await lastSample(f.name);
        expect(s.promptIds).toEqual(expected);
        expect(r.body.choices[0].token_ids).toEqual(s.outputIds);
        for (const id of s.outputIds) expect(id).toBeLessThan(codec.vocabSize);
        // The reply's text is the family's decode of the sampled ids (stop ids aside).
        const text = codec.parseAssistant(s.outputIds).content;
        expect(r.body.choices[0].message.content ?? '').toBe(text);
      }, 120_000);

      it('stops on the family’s end-of-turn token and answers it as an empty stop', async () => {
        const codec = codecs.get(f.name)!;
        const r = await chat(f.name, { messages: [{ role: 'user', content: 'hi' }], max_tokens: 6, logit_bias: { [codec.endOfTurnId]: 100 }, logprobs: true, return_token_ids: true });
        expect(r.status).toBe(200);
        const c = r.body.choices[0];
        expect(c.token_ids).toEqual([codec.endOfTurnId]);
        expect(c.finish_reason).toBe('stop');
        expect(c.message.content).toBe('');
      }, 120_000);
    });
  }
});
