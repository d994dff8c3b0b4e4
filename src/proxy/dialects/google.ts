import type { ServerResponse } from 'node:http';
import type { Message, ToolCall, ToolSchema } from '../../protocol/messages.js';
import type { ProxyRefusal } from '../openai-error.js';
import { reusedPrefix } from '../chat-request-reader.js';
import { answerOf, badRequest, field, isObject, reuseTools, sendEventStream, sendJson, unsupported, type Dialect, type DialectRoute, type InternalRequest, type ReadContext } from './dialect.js';

/** Tools that run on Google's side. */
const SERVER_TOOLS = ['googleSearch', 'googleSearchRetrieval', 'codeExecution', 'urlContext', 'retrieval', 'computerUse', 'fileSearch', 'googleMaps', 'enterpriseWebSearch'];

/**
 * Google Gemini (`POST …/models/{model}:generateContent`, `:streamGenerateContent` — server-sent
 * events with `?alt=sse`, as `@google/genai` and the Gemini CLI ask, else one JSON array —
 * and `:countTokens`); the model is the path's. Read: `systemInstruction` (a string or a content's
 * text parts), `contents` of role `user` / `model` whose parts are `text`, `functionCall` (model),
 * `functionResponse` (user: a `tool` message; linked by its `id`, else to the earliest unanswered
 * call of that name), `thought` parts (dropped: reasoning is not in the rendered history);
 * `tools[].functionDeclarations` (`parameters` or `parametersJsonSchema`; a server tool such as
 * `googleSearch` is a 400), `generationConfig` (`maxOutputTokens`, `candidateCount` 1,
 * `thinkingConfig` → the template's thinking switch). Inline or file data is a 400.
 * Written: one candidate whose `content.parts` are a `thought` part (reasoning kept apart), the
 * text and a `functionCall` per call (with `id`), `finishReason` `STOP` / `MAX_TOKENS`, and
 * `usageMetadata`; streamed as one `data:` chunk holding all of it.
 */
export class GoogleDialect implements Dialect {
  readonly name = 'google' as const;
  /**
   * The previous request's contents as sent and as read. The Gemini CLI re-sends its whole
   * history each call; a content equal (as JSON) to the previous request's at the same index is
   * not read again — the same message objects, which the token record then compares by identity
   * (chat-request-reader.ts does the same for chat).
   */
  private prev: { raw: readonly unknown[]; read: ContentRead[] } | null = null;
  /** The previous request's tools as sent and as read (see `reuseTools`). */
  private prevTools: { raw: unknown; read: ToolSchema[] } | null = null;

  read(json: unknown, route: DialectRoute, _ctx?: ReadContext): InternalRequest {
    const b = field.object(json, 'body');
    const messages: Message[] = [];
    if (b.systemInstruction !== undefined && b.systemInstruction !== null) {
      const si = b.systemInstruction;
      const text = typeof si === 'string' ? si : textParts(field.object(si, 'systemInstruction').parts, 'systemInstruction.parts');
      if (text !== '') messages.push({ role: 'system', content: text });
    }
    const contents = field.array(b.contents, 'contents');
    if (contents.length === 0 && route.op === 'generate') throw badRequest('contents', 'at least one content is required');
    // The contents re-sent unchanged from the previous request were read then (with the same open
    // calls entering each, since everything before them is unchanged too): only the rest is read.
    const read: ContentRead[] = reusedPrefix(contents, this.prev);
    /** Calls of the last model turn not answered yet: functionResponses without an id are linked by name. */
    let open: ToolCall[] = read.length > 0 ? read.at(-1)!.openAfter.slice() : [];
    for (let i = read.length; i < contents.length; i++) {
      const out: Message[] = [];
      open = readContent(contents[i], i, open, out);
      read.push({ messages: out, openAfter: open.slice() });
    }
    for (const r of read) for (const m of r.messages) messages.push(m);
    if (route.op === 'generate') this.prev = { raw: contents, read };
    const tools: ToolSchema[] = reuseTools(this.prevTools, b.tools) ?? [];
    if (b.tools !== undefined && b.tools !== null && tools !== this.prevTools?.read) {
      field.array(b.tools, 'tools').forEach((t, i) => {
        const o = field.object(t, `tools.${i}`);
        for (const key of Object.keys(o)) {
          if (key === 'functionDeclarations') continue;
          if (SERVER_TOOLS.includes(key)) throw unsupported(`tools.${i}.${key}`, `the server-side tool ${key}`);
          throw badRequest(`tools.${i}.${key}`, 'unknown tool kind (only functionDeclarations are served)');
        }
        field.array(o.functionDeclarations ?? [], `tools.${i}.functionDeclarations`).forEach((f, j) => {
          const q = `tools.${i}.functionDeclarations.${j}`;
          const fd = field.object(f, q);
          const schema = fd.parametersJsonSchema ?? fd.parameters;
          tools.push({ type: 'function', function: { name: field.string(fd.name, `${q}.name`), description: field.optString(fd.description, `${q}.description`) ?? '', parameters: schema === undefined || schema === null ? {} : field.object(schema, `${q}.parameters`) } });
        });
      });
    }
    if (route.op === 'generate') this.prevTools = { raw: b.tools, read: tools };
    const gc = b.generationConfig === undefined || b.generationConfig === null ? {} : field.object(b.generationConfig, 'generationConfig');
    const maxTokens = field.optPositiveInt(gc.maxOutputTokens, 'generationConfig.maxOutputTokens');
    if (gc.candidateCount !== undefined && gc.candidateCount !== null && gc.candidateCount !== 1) throw badRequest('generationConfig.candidateCount', 'only one candidate per request is sampled (1)', 'unsupported_value');
    field.optNumber(gc.temperature, 'generationConfig.temperature', 0, 2);
    let enableThinking: boolean | undefined;
    if (isObject(gc.thinkingConfig)) {
      const tc = gc.thinkingConfig;
      if (tc.thinkingBudget === 0) enableThinking = false;
      else if (tc.includeThoughts === true || (typeof tc.thinkingBudget === 'number' && tc.thinkingBudget !== 0)) enableThinking = true;
    }
    const stream = route.stream === true;
    return { body: { messages: [], ...(maxTokens !== undefined ? { max_tokens: maxTokens } : {}) }, messages, tools, stream, maxTokens, model: route.model, enableThinking, route };
  }

  write(res: ServerResponse, completion: Record<string, unknown>, req: InternalRequest): void {
    const a = answerOf(completion);
    const parts: Record<string, unknown>[] = [];
    if (a.reasoning) parts.push({ text: a.reasoning, thought: true });
    if (a.content) parts.push({ text: a.content });
    for (const c of a.toolCalls) parts.push({ functionCall: { id: c.id, name: c.name, args: JSON.parse(c.arguments) as unknown } });
    if (parts.length === 0) parts.push({ text: '' });
    const answer = {
      candidates: [{ content: { role: 'model', parts }, finishReason: a.finish === 'length' ? 'MAX_TOKENS' : 'STOP', index: 0 }],
      usageMetadata: { promptTokenCount: a.promptTokens, candidatesTokenCount: a.outputTokens, totalTokenCount: a.promptTokens + a.outputTokens },
      modelVersion: req.model ?? String(completion.model),
      responseId: a.id,
    };
    if (!req.stream) return sendJson(res, 200, answer);
    if (req.route.sse) return sendEventStream(res, `data: ${JSON.stringify(answer)}\r\n\r\n`);
    sendJson(res, 200, [answer]);
  }

  countBody(tokens: number): unknown {
    return { totalTokens: tokens };
  }

  errorBody(refusal: ProxyRefusal): unknown {
    return { error: { code: refusal.status, message: refusal.message, status: statusOf(refusal.status) } };
  }
}

/** What one content gave: its messages, and the calls still unanswered after it. */
interface ContentRead {
  messages: Message[];
  openAfter: ToolCall[];
}

/** Reads `contents[i]` into `out`; `open` are the calls unanswered before it (consumed). Returns those unanswered after it. */
function readContent(content: unknown, i: number, open: ToolCall[], out: Message[]): ToolCall[] {
  const p = `contents.${i}`;
  const o = field.object(content, p);
  const role = o.role ?? 'user';
  if (role !== 'user' && role !== 'model' && role !== 'function') throw badRequest(`${p}.role`, `expected user or model, got ${JSON.stringify(role)?.slice(0, 40)}`);
  const parts = field.array(o.parts, `${p}.parts`);
  if (role === 'model') {
    let text = '';
    const calls: ToolCall[] = [];
    parts.forEach((part, j) => {
      const q = `${p}.parts.${j}`;
      const x = field.object(part, q);
      if (x.thought === true) return;
      if (typeof x.text === 'string') text += x.text;
      else if (x.functionCall !== undefined) {
        const fc = field.object(x.functionCall, `${q}.functionCall`);
        const name = field.string(fc.name, `${q}.functionCall.name`);
        calls.push({ id: field.optString(fc.id, `${q}.functionCall.id`) ?? `${name}-${i}-${calls.length}`, name, arguments: fc.args === undefined || fc.args === null ? {} : field.object(fc.args, `${q}.functionCall.args`) });
      } else if (x.thoughtSignature === undefined) throw partError(x, q);
    });
    const msg: Message = { role: 'assistant', content: text };
    if (calls.length > 0) msg.tool_calls = calls;
    out.push(msg);
    return calls.slice();
  }
  const texts: string[] = [];
  parts.forEach((part, j) => {
    const q = `${p}.parts.${j}`;
    const x = field.object(part, q);
    if (typeof x.text === 'string') {
      if (x.thought !== true) texts.push(x.text);
    } else if (x.functionResponse !== undefined) {
      const fr = field.object(x.functionResponse, `${q}.functionResponse`);
      const name = field.string(fr.name, `${q}.functionResponse.name`);
      const id = field.optString(fr.id, `${q}.functionResponse.id`);
      const k = open.findIndex((c) => (id !== undefined ? c.id === id : c.name === name));
      const callId = k >= 0 ? open.splice(k, 1)[0]!.id! : (id ?? `${name}-${i}-${j}`);
      out.push({ role: 'tool', content: responseText(fr.response, `${q}.functionResponse.response`), tool_call_id: callId, name });
    } else throw partError(x, q);
  });
  if (texts.length > 0) out.push({ role: 'user', content: texts.join('\n') });
  return open;
}

/** Google's canonical status name for an HTTP status. */
function statusOf(status: number): string {
  switch (status) {
    case 400:
    case 413:
      return 'INVALID_ARGUMENT';
    case 401:
      return 'UNAUTHENTICATED';
    case 403:
      return 'PERMISSION_DENIED';
    case 404:
      return 'NOT_FOUND';
    case 409:
      return 'ABORTED';
    case 405:
    case 410:
      return 'FAILED_PRECONDITION';
    case 429:
      return 'RESOURCE_EXHAUSTED';
    case 503:
      return 'UNAVAILABLE';
    default:
      return 'INTERNAL';
  }
}

function partError(x: Record<string, unknown>, q: string): ProxyRefusal {
  for (const k of ['inlineData', 'fileData', 'executableCode', 'codeExecutionResult', 'videoMetadata']) {
    if (x[k] !== undefined) return unsupported(`${q}.${k}`, `the ${k} part`);
  }
  return badRequest(q, 'a part needs text, functionCall or functionResponse');
}

/** A content's text parts joined by newlines (no other part allowed). */
function textParts(v: unknown, param: string): string {
  return field
    .array(v, param)
    .map((part, i) => {
      const x = field.object(part, `${param}.${i}`);
      if (typeof x.text !== 'string') throw partError(x, `${param}.${i}`);
      return x.text;
    })
    .join('\n');
}

/** A function response's text: its lone `output` (or `content`) string as the Gemini CLI sends it, else the object as JSON. */
function responseText(v: unknown, param: string): string {
  if (v === undefined || v === null) return '';
  const o = field.object(v, param);
  const keys = Object.keys(o);
  if (keys.length === 1 && (keys[0] === 'output' || keys[0] === 'content') && typeof o[keys[0]] === 'string') return o[keys[0]] as string;
  return JSON.stringify(o);
}
