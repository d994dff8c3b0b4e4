import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentHandler } from '../../../src/proxy/agent-contract.js';
import { BackendPool } from '../../../src/llm/backend-pool.js';
import { codecFor, verifyBackendVocab } from '../../../src/llm/codec-registry.js';
import { ensureTinyGguf } from '../../../src/llm/gguf-writer.js';
import type { HfChatCodec } from '../../../src/llm/hf-codec.js';
import type { LlamaSample } from '../../../src/llm/llama-engine.js';
import type { Message, ToolSchema } from '../../../src/protocol/messages.js';
import type { RolloutResult } from '../../../src/protocol/trajectory.js';
import { createRuntime } from '../../../src/runtime/runtime.js';
import { startLlmServeProcess, stopServerProcesses, type ServerProcess, type ServerExitError } from '../../helpers/server-process.js';
import { FAMILIES, GPT_OSS, type Family } from '../../fixtures/model-families.js';

const ROLLOUTS = 3;
const TURNS = 4;
// gpt-oss: harmony rendered natively, its generations ended by <|call|> / <|return|>.
// Gemma 3: SentencePiece-style, llama.cpp's SPM tokenizer.
const RUN: Family[] = [FAMILIES.qwen3, FAMILIES.llama3_1, FAMILIES.deepseek_v3, GPT_OSS, FAMILIES.gemma3];

/** Starts `rollout llm-serve`; resolves its URL, or rejects with its stderr when it exits. */
function startServer(args: string[]): Promise<ServerProcess> {
  return startLlmServeProcess(['--port', '0', '--protocol', 'prorl', '--parallel', '3', ...args]);
}

const BASH: ToolSchema = { type: 'function', function: { name: 'bash', description: 'Run a shell command.', parameters: { type: 'object', properties: { cmd: { type: 'string' } }, required: ['cmd'] } } };

/**
 * A tool-calling conversation: the bash tool offered, and after each turn a tool result (the
 * call's, or an error observation for a malformed or missing call), then a user nudge on odd
 * turns, so continuations go through both the tool and the user role of every template.
 */
const toolTalker: AgentHandler = {
  name: 'tool-talk',
  async init() {
    return { messages: [{ role: 'system', content: 'You run shell commands.' }, { role: 'user', content: 'List the files.' }], tools: [BASH] };
  },
  async act(ctx) {
    const calls = ctx.assistant.tool_calls;
    const messages: Message[] =
      calls.length > 0
        ? calls.map((c, i) => ({ role: 'tool', content: `ran ${c.name}: ok`, tool_call_id: c.id ?? `call_${ctx.turn}_${i}`, name: c.name }))
        : [{ role: 'tool', content: ctx.malformed.length > 0 ? `error: ${ctx.malformed[0]!.error}` : 'error: no tool call found', name: 'bash' }];
    if (ctx.turn % 2 === 1) messages.push({ role: 'user', content: `Turn ${ctx.turn + 1}: go on.` });
    return { messages, observations: [], stop: null };
  },
  async eval() {
    return { reward: 0, resolved: false };
  },
};

/**
 * Gemma 3's template knows no tools and no tool role (roles must alternate user / model): its
 * conversation goes on with user turns only.
 */
const userTalker: AgentHandler = {
  ...toolTalker,
  name: 'user-talk',
  async act(ctx) {
    return { messages: [{ role: 'user', content: `Turn ${ctx.turn + 1}: go on.` }], observations: [], stop: null };
  },
};
const talkerOf = (f: Family): AgentHandler => (f.name === 'gemma3' ? userTalker : toolTalker);

describe('multi-turn rollouts per model family (tool-calling where the template has tools) against llm-serve engines of that vocabulary, one shared pool', () => {
  const servers = new Map<string, ServerProcess>();
  const codecs = new Map<string, HfChatCodec>();
  const results = new Map<string, RolloutResult[]>();
  const samples = new Map<string, LlamaSample>();

  beforeAll(async () => {
    for (const f of RUN) codecs.set(f.name, codecFor(f.name === 'qwen3' ? {} : { tokenizer: f.dir }, { onWarning: () => undefined }));
    const started = await Promise.all(
      RUN.map((f) => {
        const model = f.name === 'qwen3' ? ensureTinyGguf({ seed: 1 }) : ensureTinyGguf({ seed: 1, vocab: { dir: f.dir, pre: f.pre! } });
        return startServer(['--model', model, '--tokenizer', f.dir]);
      }),
    );
    RUN.forEach((f, i) => servers.set(f.name, started[i]!));
    const pool = new BackendPool({ probeIntervalMs: 0 });
    for (const f of RUN) pool.addBackend({ id: f.name, url: servers.get(f.name)!.url, protocol: 'prorl', weightVersion: 'w0', codecKey: codecs.get(f.name)!.name });
    const runtimes = RUN.map((f) => createRuntime({ llm: pool, codec: codecs.get(f.name)!, handlers: [talkerOf(f)], detectDrift: true, retries: { max: 0, backoffMs: 0, backoffMaxMs: 0 } }));
    try {
      await Promise.all(
        RUN.map(async (f, k) => {
          const handles = Array.from({ length: ROLLOUTS }, (_, i) =>
            runtimes[k]!.submit({ data_source: talkerOf(f).name, instance_id: `${f.name}-${i}` }, { max_iterations: TURNS, max_output_tokens: 8, temperature: 1, seed: i }),
          );
          results.set(f.name, await Promise.all(handles.map((h) => h.result)));
        }),
      );
    } finally {
      await Promise.all(runtimes.map((r) => r.close()));
      await pool.close();
    }
    for (const s of servers.values()) {
      const body = (await (await fetch(`${s.url}/debug/samples`)).json()) as { samples: LlamaSample[] };
      for (const x of body.samples) samples.set(`${x.instanceId}|${x.turn}`, x);
    }
    // A hang ceiling, not a timing: five real engines start here (~8 s of CPU each, most of it
    // node-llama-cpp's load), 65 s for the whole file alone on a quiet 2-core machine, ~240 s
    // with two suites at once (loaded round 17 hit the old 240 s ceiling).
  }, 600_000);

  afterAll(async () => {
    await stopServerProcesses();
  });

  for (const f of RUN) {
    describe(f.name, () => {
      it('runs every rollout for max_iterations turns, each turn served by the backend of its own model', () => {
        const rs = results.get(f.name)!;
        expect(rs.map((r) => [r.outcome, r.finish, r.trajectory.turns.length])).toEqual(Array.from({ length: ROLLOUTS }, () => ['truncated', 'max_iterations', TURNS]));
        for (const r of rs) for (const t of r.trajectory.turns) expect(t.backendId).toBe(f.name);
      });

      it('shows the tool schema to the model in the first prompt', () => {
        const first = codecs.get(f.name)!.decode(results.get(f.name)![0]!.trajectory.turns[0]!.promptIds);
        // DeepSeek-V3's template writes tool calls but no schemas.
        if (f.tools) expect(first).toContain('Run a shell command.');
        else expect(first).not.toContain('Run a shell command.');
      });

      it('keeps exactly the ids and logprobs the engine sampled, on every turn', () => {
        for (const r of results.get(f.name)!) {
          r.trajectory.turns.forEach((t, turn) => {
            const s = samples.get(`${r.instanceId}|${turn}`);
            expect(s, `${r.instanceId} turn ${turn}`).toBeDefined();
            expect(t.outputIds).toEqual(s!.outputIds);
            expect(t.logprobs).toEqual(s!.logprobs);
            expect(t.promptIds).toEqual(s!.promptIds);
          });
        }
      });

      it('grows every prompt append-only from the previous prompt and output, and masks exactly the sampled tokens', () => {
        for (const r of results.get(f.name)!) {
          const { tokens, lossMask, logprobs, turns } = r.trajectory;
          for (let i = 1; i < turns.length; i++) {
            const prev = [...turns[i - 1]!.promptIds, ...turns[i - 1]!.outputIds];
            expect(turns[i]!.promptIds.slice(0, prev.length)).toEqual(prev);
            expect(turns[i]!.promptIds.length).toBeGreaterThan(prev.length);
          }
          const last = turns.at(-1)!;
          expect([...last.promptIds, ...last.outputIds]).toEqual(tokens);
          const mask = new Array<number>(tokens.length).fill(0);
          const lp = new Array<number>(tokens.length).fill(0);
          for (const t of turns) t.outputIds.forEach((_, i) => ((mask[t.promptIds.length + i] = 1), (lp[t.promptIds.length + i] = t.logprobs[i]!)));
          expect(lossMask).toEqual(mask);
          expect(logprobs).toEqual(lp);
        }
      });

      it('reports drift only where a full re-render really differs from the append-only ids', () => {
        const drift = results.get(f.name)!.flatMap((r) => r.trajectory.diagnostics.drift.map((d) => ({ ...d, r })));
        for (const d of drift) {
          const t = d.r.trajectory.turns[d.turn];
          const ids = t ? t.promptIds : d.r.trajectory.tokens;
          expect(d.actual).toBe(ids[d.position] ?? null);
          expect(d.expected).not.toBe(d.actual);
        }
        // Qwen3's template re-renders a turn without <think> exactly as sampled: no drift.
        if (f.name === 'qwen3') expect(drift).toEqual([]);
        console.log(`${f.name}: ${drift.length} drift finding(s) over ${ROLLOUTS} rollouts x ${TURNS} turns`);
      });

      it("tokenizes every sample text exactly as llama.cpp does with this vocabulary", async () => {
        const codec = codecs.get(f.name)!;
        for (const raw of f.samples) {
          // Qwen3's tokenizer NFC-normalizes and llama.cpp does not: compare on NFC text, which both leave alone.
          const text = raw.normalize('NFC');
          const res = await fetch(`${servers.get(f.name)!.url}/tokenize`, { method: 'POST', body: JSON.stringify({ prompt: text }) });
          const { tokens } = (await res.json()) as { tokens: number[] };
          expect(codec.encode(text), JSON.stringify(text)).toEqual(tokens);
        }
      });

      it('agrees with the engine on a tokenization probe (POST /tokenize)', async () => {
        await expect(verifyBackendVocab(servers.get(f.name)!.url, codecs.get(f.name)!)).resolves.toBe(true);
      });
    });
  }

  it('refuses a tokenizer of another vocabulary at registration, naming the backend', async () => {
    await expect(verifyBackendVocab(servers.get('qwen3')!.url, codecs.get('llama3_1')!)).rejects.toThrow(/does not tokenize as the backend at http:\/\/.* at position \d+/);
  });

  it('refuses to start llm-serve when --tokenizer does not match the model, naming both', async () => {
    const err = await startServer(['--model', ensureTinyGguf({ seed: 1 }), '--tokenizer', FAMILIES.llama3_1.dir]).then(
      () => null,
      (e: ServerExitError) => e,
    );
    expect(err?.code).toBe(2);
    expect(err?.stderr).toMatch(/does not tokenize as .*tiny-qwen3-.*\.gguf/);
  }, 120_000);
});
