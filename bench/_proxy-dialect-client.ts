/**
 * The client side of the per-dialect proxy benches (bench/harness.ts, bench/proxy-profile.ts):
 * one conversation in an API dialect, streaming, on a keep-alive connection to a Unix socket
 * (our proxy's or bench/_proxy-floor.ts's), growing by the echoed answer and a user message each
 * call as an agent's does. The leading `_` keeps run-all from running it.
 */
import http from 'node:http';
import { cpuMs } from './_direct-calls.js';
import type { FloorDialect } from './_proxy-floor.js';

type Loose = Record<string, unknown>;

/** How the client speaks a dialect: path, the first request body, the body grown by an answer, the answer's text from the stream. */
interface DialectClient {
  path: string;
  first(): Loose;
  grow(body: Loose, answer: string): Loose;
  text(events: Loose[]): string;
}

const SYSTEM = 'You are a benchmark agent.';
const clients: Record<FloorDialect, DialectClient> = {
  chat: {
    path: '/v1/chat/completions',
    first: () => ({ model: 'bench', stream: true, stream_options: { include_usage: true }, max_tokens: 64, messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'Answer with a fixed sentence.' }] }),
    grow: (b, a) => ({ ...b, messages: [...(b.messages as Loose[]), { role: 'assistant', content: a }, { role: 'user', content: 'Again.' }] }),
    text: (ev) => ev.map((e) => ((e.choices as { delta?: { content?: string } }[] | undefined)?.[0]?.delta?.content ?? '')).join(''),
  },
  responses: {
    path: '/v1/responses',
    first: () => ({ model: 'bench', stream: true, store: false, max_output_tokens: 64, instructions: SYSTEM, input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Answer with a fixed sentence.' }] }] }),
    grow: (b, a) => ({ ...b, input: [...(b.input as Loose[]), { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: a }] }, { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Again.' }] }] }),
    text: (ev) => ev.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta as string).join(''),
  },
  anthropic: {
    path: '/v1/messages?beta=true',
    first: () => ({ model: 'bench', stream: true, max_tokens: 64, system: [{ type: 'text', text: SYSTEM }], messages: [{ role: 'user', content: [{ type: 'text', text: 'Answer with a fixed sentence.' }] }] }),
    grow: (b, a) => ({ ...b, messages: [...(b.messages as Loose[]), { role: 'assistant', content: [{ type: 'text', text: a }] }, { role: 'user', content: [{ type: 'text', text: 'Again.' }] }] }),
    text: (ev) => ev.filter((e) => e.type === 'content_block_delta').map((e) => (e.delta as { text?: string }).text ?? '').join(''),
  },
  google: {
    path: '/v1beta/models/bench:streamGenerateContent?alt=sse',
    first: () => ({ systemInstruction: { parts: [{ text: SYSTEM }] }, generationConfig: { maxOutputTokens: 64 }, contents: [{ role: 'user', parts: [{ text: 'Answer with a fixed sentence.' }] }] }),
    grow: (b, a) => ({ ...b, contents: [...(b.contents as Loose[]), { role: 'model', parts: [{ text: a }] }, { role: 'user', parts: [{ text: 'Again.' }] }] }),
    text: (ev) => ev.map((e) => ((e.candidates as { content: { parts: { text?: string }[] } }[] | undefined)?.[0]?.content.parts.map((p) => p.text ?? '').join('') ?? '')).join(''),
  },
};

/** The `data:` payloads of an event stream, parsed. */
function eventsOf(text: string): Loose[] {
  const out: Loose[] = [];
  for (const block of text.split(/\r?\n\r?\n/)) {
    const line = block.split('\n').find((l) => l.startsWith('data: '));
    if (line && line !== 'data: [DONE]') out.push(JSON.parse(line.slice(6)) as Loose);
  }
  return out;
}

/**
 * One client conversation in a dialect on one keep-alive connection to `socketPath`, driven a
 * block of calls at a time so that ours and the floor's can alternate.
 */
export class Conversation {
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  private body: Loose;
  private readonly c: DialectClient;
  /** Latencies of the calls after the warm-up. */
  readonly lat: number[] = [];
  /** CPU of this process (ms) and voluntary context switches over those calls. */
  cpu = 0;
  sleeps = 0;
  private done = 0;

  constructor(
    private readonly dialect: FloorDialect,
    private readonly socketPath: string,
    private readonly token: string,
    /** Calls before the measured ones. */
    private readonly warmup: number,
  ) {
    this.c = clients[dialect];
    this.body = this.c.first();
  }

  /** The next `n` calls. */
  async calls(n: number): Promise<void> {
    const measured = this.done >= this.warmup;
    const cpu0 = cpuMs();
    const vcs0 = process.resourceUsage().voluntaryContextSwitches;
    for (let i = 0; i < n; i++, this.done++) {
      const text = JSON.stringify(this.body);
      const t = performance.now();
      const out = await new Promise<string>((resolve, reject) => {
        const req = http.request({ socketPath: this.socketPath, path: this.c.path, method: 'POST', agent: this.agent, headers: { authorization: `Bearer ${this.token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) } }, (res) => {
          const parts: Buffer[] = [];
          res.on('data', (d: Buffer) => parts.push(d));
          res.on('end', () => (res.statusCode === 200 ? resolve(Buffer.concat(parts).toString()) : reject(new Error(`${this.dialect}: HTTP ${res.statusCode}: ${Buffer.concat(parts).toString().slice(0, 300)}`))));
        });
        req.on('error', reject);
        req.end(text);
      });
      const answer = this.c.text(eventsOf(out));
      if (measured) this.lat.push(performance.now() - t);
      if (!answer) throw new Error(`${this.dialect}: no text in the answer: ${out.slice(0, 300)}`);
      this.body = this.c.grow(this.body, answer);
    }
    if (measured) {
      this.cpu += cpuMs() - cpu0;
      this.sleeps += process.resourceUsage().voluntaryContextSwitches - vcs0;
    }
  }

  close(): void {
    this.agent.destroy();
  }
}

