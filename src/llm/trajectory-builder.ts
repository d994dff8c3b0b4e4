import type { ChatCodec } from './chat-codec.js';
import type { ChatContext, LogprobSemantics } from './llm-client.js';
import type { Message, ToolSchema } from '../protocol/messages.js';
import type { AssistantTurn, Trajectory } from '../protocol/trajectory.js';
import { findDrift } from './drift-detector.js';
import { firstRegression, versionRange, versionRuns, type VersionRun } from './weight-versions.js';

/** One sampled turn, as the LLM client returned it plus its measured latency. */
export interface SampledTurn {
  outputIds: number[];
  logprobs: number[];
  backendId: string;
  weightVersion: string | number | null;
  finishReason: 'stop' | 'length' | 'abort';
  latencyMs: number;
  /** Absent means `engine`. */
  tokenSource?: 'engine' | 'retokenized' | undefined;
  /** Absent means `unknown`. */
  logprobSemantics?: LogprobSemantics | undefined;
  /** The prompt the server says it saw (chat backends render their own template); compared with ours for drift. */
  enginePromptIds?: number[] | undefined;
  /** The output's versions run-length when it spans several (a generation aborted and resumed on new weights); sums to `outputIds.length`. */
  weightVersions?: VersionRun[] | undefined;
}

/** Options of {@link TrajectoryBuilder}. */
export interface TrajectoryBuilderOptions {
  /** Used for drift checks only. */
  codec?: ChatCodec | undefined;
  /** Compare each prompt with `codec.renderFull` of the conversation (costs a full render per turn). */
  detectDrift?: boolean | undefined;
  enableThinking?: boolean | undefined;
}

interface TurnRecord {
  tokenSource: 'engine' | 'retokenized';
  logprobSemantics: LogprobSemantics;
  backendId: string;
  weightVersion: string | number | null;
  /** Set only when the turn spans several versions. */
  segments: VersionRun[] | undefined;
  finishReason: SampledTurn['finishReason'];
  latencyMs: number;
  /** The client's own arrays, handed out by build() for small trajectories instead of slices of the flat list. */
  outputIds: number[];
  logprobs: number[];
  /** The prompt as the turn's request read it ({@link TrajectoryBuilder.promptIds}), when it did: build() hands it out. */
  prompt: number[] | undefined;
  /** Prompt = tokens[0, promptLen); output = tokens[promptLen, promptLen + outputLen). */
  promptLen: number;
  outputLen: number;
  messageIndex: number;
}

/**
 * Accumulates one rollout's tokens append-only: the first prompt, then per turn the sampled ids
 * (loss mask 1, their logprobs) and the templated continuation (mask 0, logprob 0). Per-turn
 * prompts are stored as lengths into the flat list, so memory stays linear in the conversation;
 * {@link build} materializes the {@link Trajectory}.
 *
 * The token record, while the per-turn prompts total at most {@link KEPT_PROMPTS_LIMIT} ids, is
 * the last flat prompt made (an exact-size array, never changed once made) followed by the arrays
 * appended since, kept as the codec and the client returned them (so the callers must not change
 * an array they have handed in). The flat list is made when it is read ({@link promptIds}: each
 * turn's request) and at {@link build}, which hands each turn the prompt its request read: the
 * copies the eager build would make anyway, made once. A record grown in place would copy itself
 * on every growth (V8 grows an array by half again), and every copy a rollout holds across an
 * await is copied again by the scavenger: most of what the orchestration benchmark's GC did
 * (docs/core.md). Past the limit a copy per turn would be quadratic in the turns, so the record
 * becomes one array of the builder's own that grows in place, and `promptIds` a live view of it.
 *
 * Invariants: `tokens`, the mask and the logprobs always have the same length; the prompt of
 * turn k is a prefix of the prompt of turn k+1 (earlier turns are never re-tokenized).
 *
 * Messages view: assistant messages carry `input_ids` (their full prompt), `token_ids` (the
 * sampled ids) and `logprobs`. A continuation's templated ids are put on its last message as
 * `token_ids` (covering every message of that continuation); the first prompt's ids are not
 * split per message.
 */
export class TrajectoryBuilder {
  /** The flat record up to its last read; never changed once made. */
  private flat: number[] = [];
  /** The arrays appended after {@link flat}, in order. */
  private tail: number[][] = [];
  /** Tokens in the record: `flat.length` + the tail's lengths. */
  private n = 0;
  /** The per-turn prompt ids kept so far (each turn's `prompt`). */
  private keptIds = 0;
  /** Past {@link KEPT_PROMPTS_LIMIT}: `flat` is the builder's own array, appended to in place, and the tail stays empty. */
  private inPlace = false;
  private readonly turns: TurnRecord[] = [];
  private readonly messages: Message[] = [];
  /** Per continuation: the index of its last message, and its templated ids (handed out as that message's `token_ids`). */
  private readonly contAt: number[] = [];
  private readonly contIds: number[][] = [];
  private tools: ToolSchema[] = [];
  private readonly drift: { turn: number; position: number; expected: number | null; actual: number | null }[] = [];
  private lastOutput: number[] = [];
  private finished = false;
  private retokenized = false;
  /**
   * The last turn was re-tokenized from a chat server that reports no prompt ids: the server
   * renders the next prompt from the messages itself, and nothing else would tell whether that
   * render extends what the trajectory holds.
   */
  private unseenServerPrompt = false;
  private chatView: { messages: readonly Message[]; tools: readonly ToolSchema[]; codec: ChatCodec } | undefined;

  constructor(private readonly opts: TrajectoryBuilderOptions = {}) {}

  /** Number of tokens so far (the length of the next prompt). */
  get length(): number {
    return this.n;
  }

  /** Assistant turns recorded. */
  get turnCount(): number {
    return this.turns.length;
  }

  /**
   * The current prompt: every token so far. Callers must not mutate it. While the per-turn
   * prompts total at most {@link KEPT_PROMPTS_LIMIT} ids it is one array made on the first read
   * after an append (the turn's request reads it; build() hands it out as that turn's
   * `promptIds`), which later appends do not change; past that, a live view of the record, which
   * changes on the next append.
   */
  get promptIds(): readonly number[] {
    return this.tokens();
  }

  /** What the model sampled last (for `codec.encodeContinuation`). */
  get lastOutputIds(): number[] {
    return this.lastOutput;
  }

  /** The conversation so far (the live array; do not mutate). */
  get messageView(): readonly Message[] {
    return this.messages;
  }

  /**
   * The conversation as chat-completions backends need it (`GenerateRequest.chat`): the live
   * messages and tools plus the codec to re-tokenize a text reply. Undefined without a codec.
   */
  get chat(): ChatContext | undefined {
    const codec = this.opts.codec;
    if (!codec) return undefined;
    // Plain data fields, not accessors: `messages` is the live array and `tools` is kept in step
    // by start() (an object literal with getters cost ~0.5 KB per rollout, kept while it runs).
    return (this.chatView ??= { messages: this.messages, tools: this.tools, codec });
  }

  /** How the last sampled turn ended (`length`: cut by the token limit), or null before any turn. */
  get lastFinishReason(): SampledTurn['finishReason'] | null {
    return this.turns.at(-1)?.finishReason ?? null;
  }

  /** Starts the trajectory with the first messages, the tools and their prompt ids. Call once. */
  start(messages: Message[], tools: ToolSchema[], promptIds: number[]): void {
    if (this.n || this.messages.length) throw new Error('TrajectoryBuilder.start called twice');
    this.tools = tools;
    if (this.chatView) this.chatView.tools = tools;
    this.messages.push(...messages);
    // The codec's array is the record's first flat list: the first request reads it as it is.
    this.flat = promptIds;
    this.n = promptIds.length;
    this.checkDrift();
  }

  /**
   * Records a sampled turn and its parsed assistant message. Throws when the logprobs do not
   * align with the output ids (a backend fault). `latencyMs`, when given, is the turn's latency
   * instead of `turn.latencyMs`: the caller may then pass the client's result itself rather than
   * a copy of it with the latency added (the runtime does, once per turn).
   */
  addTurn(turn: Omit<SampledTurn, 'latencyMs'> & { latencyMs?: number | undefined }, assistant: Message, latencyMs = turn.latencyMs ?? 0): void {
    if (turn.logprobs.length !== turn.outputIds.length) {
      throw new Error(`logprobs (${turn.logprobs.length}) do not align with output ids (${turn.outputIds.length})`);
    }
    this.assertOpen();
    const outputIds = turn.outputIds;
    const tokenSource = turn.tokenSource ?? 'engine';
    if (tokenSource === 'retokenized') this.retokenized = true;
    if (turn.enginePromptIds) this.checkEnginePrompt(turn.enginePromptIds);
    this.unseenServerPrompt = tokenSource === 'retokenized' && turn.enginePromptIds === undefined;
    // Built field by field: a rest/spread copy per turn was measurable garbage on the benchmark.
    this.turns.push({
      tokenSource,
      logprobSemantics: turn.logprobSemantics ?? 'unknown',
      backendId: turn.backendId,
      weightVersion: turn.weightVersion,
      segments: turn.weightVersions && turn.weightVersions.length > 1 ? turn.weightVersions : undefined,
      finishReason: turn.finishReason,
      latencyMs,
      outputIds,
      logprobs: turn.logprobs,
      prompt: this.keepPrompt(),
      promptLen: this.n,
      outputLen: outputIds.length,
      messageIndex: this.messages.length,
    });
    this.messages.push(assistant);
    this.push(outputIds);
    this.lastOutput = outputIds;
  }

  /** Appends the observation messages and their templated ids (mask 0). */
  addContinuation(messages: Message[], ids: number[]): void {
    this.assertOpen();
    this.messages.push(...messages);
    this.push(ids);
    if (messages.length) {
      this.contAt.push(this.messages.length - 1);
      this.contIds.push(ids);
    }
    if (this.unseenServerPrompt) this.checkServerRender();
    else this.checkDrift();
  }

  /** Appends messages that were not templated (e.g. an observation that no longer fit the context). */
  addUntokenizedMessages(messages: Message[]): void {
    this.assertOpen();
    this.messages.push(...messages);
  }

  /**
   * A copy of this builder as it is now, which grows apart from it (tree rollouts, #26): a
   * branch's own token record starts from its parent's tokens, turns and messages (shared, as
   * neither changes them, except a record grown in place, which is copied). Throws after
   * {@link build}.
   */
  fork(): TrajectoryBuilder {
    this.assertOpen();
    const b = new TrajectoryBuilder(this.opts);
    b.flat = this.inPlace ? this.flat.slice() : this.flat;
    b.tail = this.tail.slice();
    b.n = this.n;
    b.keptIds = this.keptIds;
    b.inPlace = this.inPlace;
    // Records and messages are not changed once appended (build() copies what it decorates).
    b.turns.push(...this.turns);
    b.messages.push(...this.messages);
    b.contAt.push(...this.contAt);
    b.contIds.push(...this.contIds);
    b.drift.push(...this.drift);
    b.tools = this.tools;
    b.lastOutput = this.lastOutput;
    b.retokenized = this.retokenized;
    b.unseenServerPrompt = this.unseenServerPrompt;
    return b;
  }

  /**
   * Materializes the trajectory and ends the builder (later appends throw). The flat `tokens`
   * are made here (or are the last prompt read, when nothing was appended since); `lossMask` and
   * `logprobs` are made here in one pass.
   * Per-turn `promptIds` / `outputIds` / `logprobs` and the messages' `input_ids` / `token_ids` /
   * `logprobs` are, once their total passes 65,536 ids, enumerable getters that slice the flat
   * list on first read and cache it: the per-turn prompts are quadratic in the number of turns,
   * and a trainer reading only the flat list never pays for them. JSON.stringify and
   * structuredClone read them like plain fields. Below that, per-turn `outputIds` / `logprobs`
   * are the arrays the LLM client returned (same values as the flat list's span), not copies,
   * and a turn's `promptIds` the array its request read, when it read one. A continuation's
   * `token_ids` are always the codec's own array.
   */
  build(): Trajectory {
    const tokens = this.tokens();
    this.finished = true;
    const recs = this.turns;
    // Mask and logprobs are made here, once, rather than grown on every turn.
    const n = tokens.length;
    const mask = maskZeros(n);
    const lps = zeros(n);
    let promptTotal = 0;
    for (let i = 0; i < recs.length; i++) {
      const t = recs[i]!;
      const l = t.logprobs;
      for (let j = 0; j < t.outputLen; j++) {
        mask[t.promptLen + j] = 1;
        lps[t.promptLen + j] = l[j]!;
      }
      promptTotal += t.promptLen;
    }
    // Only messages that get ids are copied; the others are handed over as they are.
    const messages = this.messages.slice();
    const turns: AssistantTurn[] = new Array(recs.length);
    if (promptTotal <= EAGER_LIMIT) {
      // Small trajectories are built eagerly, with plain fields (accessor properties cost more
      // than the copies), and the per-turn output ids and logprobs are the client's own arrays
      // rather than slices of the flat list.
      for (let i = 0; i < recs.length; i++) {
        const t = recs[i]!;
        const promptIds = t.prompt ?? tokens.slice(0, t.promptLen);
        turns[i] = {
          backendId: t.backendId,
          weightVersion: t.weightVersion,
          finishReason: t.finishReason,
          latencyMs: t.latencyMs,
          promptIds,
          outputIds: t.outputIds,
          logprobs: t.logprobs,
          tokenSource: t.tokenSource,
          logprobSemantics: t.logprobSemantics,
        } as AssistantTurn;
        // Object.assign then plain sets, not `{ ...m, input_ids, … }`: the spread with extra keys
        // measured ~1 µs per message (a third of build()), this ~0.1 µs. Same key order.
        const nm = Object.assign({}, messages[t.messageIndex]!) as Record<string, unknown>;
        nm.input_ids = promptIds;
        nm.token_ids = t.outputIds;
        nm.logprobs = t.logprobs;
        messages[t.messageIndex] = nm as Message;
      }
    } else {
      for (let i = 0; i < recs.length; i++) {
        const t = recs[i]!;
        const o = { backendId: t.backendId, weightVersion: t.weightVersion, finishReason: t.finishReason, latencyMs: t.latencyMs, tokenSource: t.tokenSource, logprobSemantics: t.logprobSemantics } as AssistantTurn;
        lazy(o, 'promptIds', () => t.prompt ?? tokens.slice(0, t.promptLen));
        lazy(o, 'outputIds', () => tokens.slice(t.promptLen, t.promptLen + t.outputLen));
        lazy(o, 'logprobs', () => lps.slice(t.promptLen, t.promptLen + t.outputLen));
        turns[i] = o;
        const m = (messages[t.messageIndex] = { ...messages[t.messageIndex]! });
        lazy(m, 'input_ids', () => o.promptIds);
        lazy(m, 'token_ids', () => o.outputIds);
        lazy(m, 'logprobs', () => o.logprobs);
      }
    }
    // Each continuation's templated ids, the codec's own array, on its last message (any size).
    for (let k = 0; k < this.contAt.length; k++) {
      const at = this.contAt[k]!;
      const nm = Object.assign({}, messages[at]!) as Record<string, unknown>;
      nm.token_ids = this.contIds[k];
      messages[at] = nm as Message;
    }
    // Versions per token, run-length (one entry per version change, not per token), from the records.
    // A resumed turn contributes one span per version it was sampled at.
    const spans = recs.flatMap((t, turn) => t.segments?.map((g) => ({ turn, weightVersion: g.version, outputIds: { length: g.tokens } })) ?? [{ turn, weightVersion: t.weightVersion, outputIds: { length: t.outputLen } }]);
    const runs = versionRuns(spans);
    const range = versionRange(runs);
    const back = firstRegression(spans.map((x) => x.weightVersion));
    return {
      turns,
      tokens,
      lossMask: mask,
      logprobs: lps,
      messages,
      tools: this.tools,
      diagnostics: back < 0 ? { drift: this.drift } : { drift: this.drift, weightVersionRegressed: { turn: spans[back]!.turn, version: spans[back]!.weightVersion } },
      tokenSource: this.retokenized ? 'retokenized' : 'engine',
      weightVersions: runs,
      minWeightVersion: range.min,
      maxWeightVersion: range.max,
    };
  }

  /** Appends an array to the record: kept as it is, or copied onto a record grown in place. */
  private push(ids: number[]): void {
    if (ids.length === 0) return;
    this.n += ids.length;
    if (!this.inPlace) {
      this.tail.push(ids);
      return;
    }
    const flat = this.flat;
    for (let i = 0; i < ids.length; i++) flat.push(ids[i]!);
  }

  /**
   * The prompt of the turn being added, kept for build() when the record is one array (no tail)
   * and the kept prompts stay within {@link KEPT_PROMPTS_LIMIT}. The first turn past the limit
   * turns the record into one array of the builder's own, grown in place from then on.
   */
  private keepPrompt(): number[] | undefined {
    if (this.inPlace) return undefined;
    if (this.keptIds + this.n <= KEPT_PROMPTS_LIMIT) {
      if (this.tail.length > 0) return undefined;
      this.keptIds += this.n;
      return this.flat;
    }
    // A new array: the current one may be a kept prompt or the codec's.
    this.flat = this.tail.length === 0 ? this.flat.slice() : this.tokens();
    this.inPlace = true;
    return undefined;
  }

  /** The flat record, made from the last one and the tail when something was appended since. */
  private tokens(): number[] {
    const tail = this.tail;
    if (tail.length === 0) return this.flat;
    // concat copies packed arrays with one memcpy each, into an exact-size array.
    this.flat = this.flat.concat(...tail);
    this.tail = [];
    return this.flat;
  }

  private assertOpen(): void {
    if (this.finished) throw new Error('TrajectoryBuilder: build() was called; the trajectory is final');
  }

  /**
   * A chat backend renders its own template each turn: where the prompt it reports differs from
   * our append-only one, record the first differing position (the trajectory keeps ours, which
   * is what the later turns extend).
   */
  private checkEnginePrompt(engine: number[]): void {
    const ours = this.tokens();
    const n = Math.max(engine.length, ours.length);
    for (let i = 0; i < n; i++) {
      if (engine[i] !== ours[i]) {
        this.drift.push({ turn: this.turns.length, position: i, expected: engine[i] ?? null, actual: ours[i] ?? null });
        return;
      }
    }
  }

  /**
   * After a re-tokenized turn from a server that reports no prompt ids (a stock OpenAI endpoint),
   * the server's next prompt is its template's render of the messages, which the trajectory's
   * prompt need not extend (a template that trims text, drops a think block or re-serialises
   * calls): compare with that render — the plain render, no sampled ids spliced in, since the
   * server has none — and record the first differing position (expected = the server's). Always
   * on in this mode, `detectDrift` or not: it is the only sign of the difference (#28). A
   * template that refuses the conversation is not drift (the server's call would fail instead).
   */
  private checkServerRender(): void {
    const codec = this.opts.codec;
    if (!codec) return;
    let expected: number[];
    try {
      expected = codec.encodePrompt(this.messages, this.tools, this.opts.enableThinking === undefined ? undefined : { enableThinking: this.opts.enableThinking });
    } catch {
      return;
    }
    const f = findDrift(this.turns.length, expected, this.tokens());
    if (f) this.drift.push(f);
  }

  /** Compares the incremental ids with a full re-render; records the first differing position. */
  private checkDrift(): void {
    const codec = this.opts.codec;
    if (!this.opts.detectDrift || !codec?.renderFull) return;
    const expected = codec.renderFull(this.messages, this.tools, this.opts.enableThinking === undefined ? undefined : { enableThinking: this.opts.enableThinking });
    const actual = this.tokens();
    const n = Math.max(expected.length, actual.length);
    for (let i = 0; i < n; i++) {
      if (expected[i] !== actual[i]) {
        this.drift.push({ turn: this.turns.length, position: i, expected: expected[i] ?? null, actual: actual[i] ?? null });
        return;
      }
    }
  }
}

/** Above this many per-turn prompt ids in total, per-turn arrays are sliced on first read. */
const EAGER_LIMIT = 1 << 16;

/**
 * The per-turn prompts a running builder keeps for build() (ids in all, 128 KB): past it the record
 * grows in place, as a copy per turn would be quadratic in the turns and the prompts would be
 * held for the whole rollout.
 */
const KEPT_PROMPTS_LIMIT = 1 << 14;

/**
 * A zero-filled array already in V8's double representation, so writing logprobs into it does
 * not first convert a small-integer array (a second allocation of the whole length). Sliced from
 * a shared template up to {@link ZEROS_CACHED} entries.
 */
function zeros(n: number): number[] {
  if (n > ZEROS_CACHED) return new Array<number>(n).fill(0);
  if (n > zeroTemplate.length) {
    const t = [0.5];
    t[0] = 0;
    for (let i = 1; i < Math.min(ZEROS_CACHED, Math.max(n, 2 * zeroTemplate.length)); i++) t.push(0);
    zeroTemplate = t;
  }
  return zeroTemplate.slice(0, n);
}
const ZEROS_CACHED = 1 << 15;
let zeroTemplate: number[] = [];

/**
 * A zero-filled loss mask: a slice of a shared template of small integers up to
 * {@link ZEROS_CACHED} entries (a packed copy, ~2.5x cheaper than `new Array(n).fill(0)`,
 * which also leaves the array holey).
 */
function maskZeros(n: number): (0 | 1)[] {
  if (n > ZEROS_CACHED) return new Array<0 | 1>(n).fill(0);
  if (n > maskTemplate.length) {
    const t: (0 | 1)[] = [];
    for (let i = 0; i < Math.min(ZEROS_CACHED, Math.max(n, 2 * maskTemplate.length)); i++) t.push(0);
    maskTemplate = t;
  }
  return maskTemplate.slice(0, n);
}
let maskTemplate: (0 | 1)[] = [];

/** Defines an enumerable property computed on first read and then cached as a plain value. */
function lazy<T extends object>(obj: T, key: string, compute: () => unknown): void {
  Object.defineProperty(obj, key, {
    enumerable: true,
    configurable: true,
    get() {
      const v = compute();
      Object.defineProperty(obj, key, { value: v, enumerable: true, configurable: true, writable: true });
      return v;
    },
    set(v: unknown) {
      Object.defineProperty(obj, key, { value: v, enumerable: true, configurable: true, writable: true });
    },
  });
}

