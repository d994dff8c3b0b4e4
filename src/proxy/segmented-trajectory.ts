import type { ChatCodec } from '../llm/chat-codec.js';
import { continuationOf, type DriftFinding } from '../llm/drift-detector.js';
import { TrajectoryBuilder, type SampledTurn } from '../llm/trajectory-builder.js';
import { versionRange } from '../llm/weight-versions.js';
import type { Message, ToolCall, ToolSchema } from '../protocol/messages.js';
import type { Trajectory } from '../protocol/trajectory.js';

/** How a chat request was placed on the token record. */
export type Placement =
  /** The first request: a segment starts. */
  | { kind: 'first' }
  /** It extends the previous prompt + output: only the new messages' templated ids were appended (mask 0). */
  | { kind: 'extend'; via: 'messages' | 'tokens' }
  /** It rewrote history: a new segment starts, and `finding` says where the tokens first differ. */
  | { kind: 'rewrite'; finding: DriftFinding };

/** What the builders are made with. */
export interface SegmentOptions {
  codec: ChatCodec;
  detectDrift?: boolean | undefined;
  enableThinking?: boolean | undefined;
}

/**
 * The token record of a `harness` rollout, where the agent — not the runtime — owns the
 * conversation and sends all of it with every request. Each request is placed on the record
 * ({@link place}) before it is sampled:
 *
 * 1. its messages are the previous request's + the assistant message the proxy answered + new
 *    ones: the new ones are templated with `codec.encodeContinuation` after the sampled ids, as
 *    the runtime's own loop does — the sampled ids are never re-tokenized;
 * 2. else its full render starts with the previous prompt + output token for token: the tail is
 *    appended;
 * 3. else the agent rewrote its history (summarised, dropped, edited): the current segment is
 *    closed and a new one starts from the full render; the drift detector's finding (first
 *    differing position) is kept in `diagnostics.rewrites`.
 *
 * {@link build} gives one token-exact trajectory when no rewrite happened, else the segments one
 * after another with an explicit `segments` list. Nothing is ever silently re-tokenized.
 */
export class SegmentedTrajectory {
  private readonly done: TrajectoryBuilder[] = [];
  private current: TrajectoryBuilder | null = null;
  /** The last request's messages and the assistant message answered to it (the echo to expect). */
  private lastMessages: Message[] = [];
  private lastAssistant: Message | null = null;
  private lastTools = '';
  private readonly rewrites: DriftFinding[] = [];
  private turns = 0;

  constructor(private readonly opts: SegmentOptions) {}

  /** Segments so far (0 before the first request). */
  get segmentCount(): number {
    return this.done.length + (this.current ? 1 : 0);
  }

  /** Tokens over every segment. */
  get totalTokens(): number {
    let n = this.current?.length ?? 0;
    for (const b of this.done) n += b.length;
    return n;
  }

  /** The prompt to sample next (a live view; valid until the next call). */
  get promptIds(): readonly number[] {
    return this.current?.promptIds ?? [];
  }

  /** The current segment's conversation (what `GenerateRequest.chat` and the eval read). */
  get messages(): readonly Message[] {
    return this.current?.messageView ?? [];
  }

  /** Places a request on the record (see the class comment) and says how. */
  place(messages: Message[], tools: ToolSchema[]): Placement {
    const { codec } = this.opts;
    const thinking = this.opts.enableThinking === undefined ? undefined : { enableThinking: this.opts.enableThinking };
    const toolsKey = JSON.stringify(tools);
    const cur = this.current;
    if (!cur) {
      this.startSegment(messages, tools, codec.encodePrompt(messages, tools, thinking));
      this.remember(messages, toolsKey);
      return { kind: 'first' };
    }
    const prev = this.lastMessages;
    const k = prev.length + 1;
    if (toolsKey === this.lastTools && this.lastAssistant && messages.length > k && prefixMatches(messages, prev) && sameMessage(messages[prev.length]!, this.lastAssistant)) {
      const added = messages.slice(k);
      cur.addContinuation(added, codec.encodeContinuation(added, cur.lastOutputIds, thinking));
      this.remember(messages, toolsKey);
      return { kind: 'extend', via: 'messages' };
    }
    const full = codec.encodePrompt(messages, tools, thinking);
    const rel = continuationOf(this.turns, cur.promptIds, full);
    if (rel.kind === 'extends' && toolsKey === this.lastTools) {
      cur.addContinuation(messages.slice(Math.min(messages.length, k)), full.slice(cur.length));
      this.remember(messages, toolsKey);
      return { kind: 'extend', via: 'tokens' };
    }
    const finding = rel.kind === 'rewrite' ? rel.finding : { turn: this.turns, position: cur.length, expected: full[cur.length] ?? null, actual: null };
    this.rewrites.push(finding);
    this.done.push(cur);
    this.startSegment(messages, tools, full);
    this.remember(messages, toolsKey);
    return { kind: 'rewrite', finding };
  }

  /** Records the sampled turn and the assistant message the proxy answered with. */
  addTurn(turn: SampledTurn, assistant: Message): void {
    this.current!.addTurn(turn, assistant);
    this.lastAssistant = assistant;
    this.turns++;
  }

  /** The rollout's trajectory: one sequence, or the segments with `segments` (see the class comment). */
  build(): Trajectory {
    const all = this.current ? [...this.done, this.current] : this.done;
    if (all.length === 0) return withContinuity(new TrajectoryBuilder().build(), [], 'token-exact');
    const built = all.map((b) => b.build());
    if (built.length === 1) return withContinuity(built[0]!, [], 'token-exact');
    const out: Trajectory = {
      turns: [],
      tokens: [],
      lossMask: [],
      logprobs: [],
      messages: [],
      tools: built.at(-1)!.tools,
      diagnostics: { drift: [] },
      tokenSource: built.some((t) => t.tokenSource === 'retokenized') ? 'retokenized' : 'engine',
      weightVersions: [],
      segments: [],
    };
    for (const t of built) {
      const seg = { tokenStart: out.tokens.length, tokenEnd: 0, turnStart: out.turns.length, turnEnd: 0, messageStart: out.messages.length, messageEnd: 0 };
      const turnBase = out.turns.length;
      push(out.tokens, t.tokens);
      push(out.lossMask, t.lossMask);
      push(out.logprobs, t.logprobs);
      push(out.turns, t.turns);
      push(out.messages, t.messages);
      for (const d of t.diagnostics.drift) out.diagnostics.drift.push({ ...d, turn: d.turn + turnBase });
      for (const r of t.weightVersions ?? []) {
        const last = out.weightVersions!.at(-1);
        if (last && last.version === r.version) last.tokens += r.tokens;
        else out.weightVersions!.push({ ...r });
      }
      out.segments!.push({ ...seg, tokenEnd: out.tokens.length, turnEnd: out.turns.length, messageEnd: out.messages.length });
    }
    const range = versionRange(out.weightVersions!);
    out.minWeightVersion = range.min;
    out.maxWeightVersion = range.max;
    return withContinuity(out, this.rewrites, 'segmented');
  }

  private startSegment(messages: Message[], tools: ToolSchema[], ids: number[]): void {
    const b = new TrajectoryBuilder({ codec: this.opts.codec, detectDrift: this.opts.detectDrift, enableThinking: this.opts.enableThinking });
    b.start(messages, tools, ids);
    this.current = b;
  }

  private remember(messages: Message[], toolsKey: string): void {
    this.lastMessages = messages;
    this.lastTools = toolsKey;
  }
}

/** Adds the drift detector's verdict: `continuity` (`token-exact` / `segmented`) and the rewrites found. */
function withContinuity(t: Trajectory, rewrites: DriftFinding[], continuity: 'token-exact' | 'segmented'): Trajectory {
  t.diagnostics = { ...t.diagnostics, continuity, rewrites };
  return t;
}

function push<T>(into: T[], from: readonly T[]): void {
  for (let i = 0; i < from.length; i++) into.push(from[i]!);
}

function prefixMatches(messages: readonly Message[], prev: readonly Message[]): boolean {
  for (let i = 0; i < prev.length; i++) if (!sameMessage(messages[i]!, prev[i]!)) return false;
  return true;
}

const NO_CALLS: readonly ToolCall[] = [];

/** Same role, content, tool calls (name and arguments; ids may be the harness's own) and tool link. */
function sameMessage(a: Message, b: Message): boolean {
  // The request reader hands the re-sent history back as the same objects.
  if (a === b) return true;
  if (a.role !== b.role || a.content !== b.content || (a.tool_call_id ?? '') !== (b.tool_call_id ?? '')) return false;
  const x = a.tool_calls ?? NO_CALLS;
  const y = b.tool_calls ?? NO_CALLS;
  if (x.length !== y.length) return false;
  for (let i = 0; i < x.length; i++) {
    if (x[i]!.name !== y[i]!.name || JSON.stringify(x[i]!.arguments) !== JSON.stringify(y[i]!.arguments)) return false;
  }
  return true;
}
