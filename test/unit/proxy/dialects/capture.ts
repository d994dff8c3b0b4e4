import type { ServerResponse } from 'node:http';
import { chatCompletion } from '../../../../src/llm/openai-chat-route.js';
import type { Message } from '../../../../src/protocol/messages.js';
import { ProxyRefusal } from '../../../../src/proxy/openai-error.js';
import { TestCodec } from '../../../../src/testing/test-codec.js';

/** What a dialect wrote: status, headers and body text. */
export interface Captured {
  status: number;
  headers: Record<string, string>;
  text: string;
}

/** A stand-in for the response a dialect writes to (the proxy's real socket is in the integration tests). */
export function captureResponse(): { res: ServerResponse; out: Captured } {
  const out: Captured = { status: 0, headers: {}, text: '' };
  const res = {
    headersSent: false,
    writableEnded: false,
    destroyed: false,
    writeHead(status: number, headers: Record<string, string>) {
      out.status = status;
      out.headers = headers;
      this.headersSent = true;
      return this;
    },
    end(text: string) {
      out.text = text;
      this.writableEnded = true;
      return this;
    },
  };
  return { res: res as unknown as ServerResponse, out };
}

const codec = new TestCodec();

/** The internal answer (a `chat.completion`) to a turn, as the loop makes it. */
export function completionOf(turn: { content?: string; tool_calls?: { name: string; arguments: Record<string, unknown> }[] }, finishReason: 'stop' | 'length' = 'stop', n = 1): Record<string, unknown> {
  const outputIds = codec.encodeAssistant(turn);
  return chatCompletion(codec, { messages: [] }, { promptIds: [1, 2, 3, 4, 5], outputIds, logprobs: outputIds.map(() => -0.5), finishReason }, { model: 'test', n, returnTokenIds: false });
}

/** The events of an SSE body: `event:` name (or `message`) and parsed `data:` (or the raw text of `[DONE]`). */
export function sseEvents(text: string): { event: string; data: unknown }[] {
  return text
    .split('\n\n')
    .filter((b) => b.trim() !== '')
    .map((b) => {
      let event = 'message';
      let data = '';
      for (const line of b.split('\n')) {
        if (line.startsWith('event: ')) event = line.slice(7);
        else if (line.startsWith('data: ')) data += line.slice(6);
      }
      return { event, data: data === '[DONE]' ? data : (JSON.parse(data) as unknown) };
    });
}

export type { Message };

/** The refusal `f` throws (any other error is rethrown; none is an error). */
export function refusalOf(f: () => unknown): ProxyRefusal {
  try {
    f();
  } catch (e) {
    if (e instanceof ProxyRefusal) return e;
    throw e;
  }
  throw new Error('no refusal');
}
