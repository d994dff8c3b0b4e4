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
  /**
   * It extends a sequence's previous prompt + output: only the new messages' templated ids were
   * appended (mask 0). `resumed`: that sequence is not the one the previous call was placed on
   * (the main conversation again after a sub-agent's or a side call).
   */
  | { kind: 'extend'; via: 'messages' | 'tokens'; resumed?: true }
  /** It extends no sequence (history rewritten, compacted, a sub-agent's first call): a new segment starts, and `finding` says where the tokens first leave the last call's. */
  | { kind: 'rewrite'; finding: DriftFinding };

/** What the builders are made with. */
export interface SegmentOptions {
  codec: ChatCodec;
  detectDrift?: boolean | undefined;
  /** The rollout's thinking switch: when set, it wins over what a request asks. */
  enableThinking?: boolean | undefined;
}

/** How a rollout's calls merged: `calls` placed on `sequences` segments, `callsPerSequence` in segment order. */
export interface MergeReport {
  calls: number;
  sequences: number;
  callsPerSequence: number[];
}

/** One sequence of the record and what its last call looked like, to tell whether the next extends it. */
interface Segment {
  readonly b: TrajectoryBuilder;
  readonly thinking: { enableThinking: boolean } | undefined;
  /** The last request's messages and the assistant message answered to it (the echo to expect). */
  lastMessages: Message[];
  lastAssistant: Message | null;
  lastTools: string;
  calls: number;
}

/**
 * The token record of a `harness` rollout, where the agent — not the runtime — owns the
 * conversation and sends all of it with every request, in whichever API dialect. Each request is
 * placed on the record ({@link place}) before it is sampled:
 *
 * 1. its messages are a sequence's last request's + the assistant message the proxy answered +
 *    new ones: the new ones are templated with `codec.encodeContinuation` after the sampled ids,
 *    as the runtime's own loop does — the sampled ids are never re-tokenized;
 * 2. else its full render starts with a sequence's last prompt + output token for token: the
 *    tail is appended;
 * 3. else it extends no sequence — the agent rewrote or compacted its history, or a sub-agent (a
 *    side call: a title, a summary) started its own conversation — and a new segment starts from
 *    the full render; the drift detector's finding against the last call's sequence is kept in
 *    `diagnostics.rewrites`.
 *
 * Every sequence stays open: the current one is tried first, then the others, latest first, so
 * the main conversation resumes its own sequence after a sub-agent's calls (Polar's prefix
 * merging routes each completion to the chain it extends the same way). {@link build} gives one
 * token-exact trajectory when all calls merged into one, else the segments one after another
 * with an explicit `segments` list; `diagnostics.merge` says how many calls went into how many
 * sequences. Nothing is ever silently re-tokenized.
 */
export class SegmentedTrajectory {
  /** Every segment, in the order they started. */
  private readonly segs: Segment[] = [];
  private current: Segment | null = null;
  private readonly rewrites: DriftFinding[] = [];
  private turns = 0;
  private calls = 0;
  /** The last request's tools and their JSON: a reader hands back the same array for tools re-sent unchanged (dialect.ts `reuseTools`). */
  private lastTools: { tools: ToolSchema[]; key: string } | null = null;

  constructor(private readonly opts: SegmentOptions) {}

  /** Segments so far (0 before the first request). */
  get segmentCount(): number {
    return this.segs.length;
  }

  /** Tokens over every segment. */
  get totalTokens(): number {
    let n = 0;
    for (const s of this.segs) n += s.b.length;
    return n;
  }

  /** The prompt to sample next (one array; later appends do not change it). */
  get promptIds(): readonly number[] {
    return this.current?.b.promptIds ?? [];
  }

  /** The current segment's conversation (what `GenerateRequest.chat` and the eval read). */
  get messages(): readonly Message[] {
    return this.current?.b.messageView ?? [];
  }

  /** How the calls so far merged into sequences. */
  get merge(): MergeReport {
    return { calls: this.calls, sequences: this.segs.length, callsPerSequence: this.segs.map((s) => s.calls) };
  }

  /**
   * Places a request on the record (see the class comment) and says how. `enableThinking` is the
   * request's own thinking switch, used when the rollout sets none.
   */
  place(messages: Message[], tools: ToolSchema[], enableThinking?: boolean): Placement {
    const { codec } = this.opts;
    const on = this.opts.enableThinking ?? enableThinking;
    const thinking = on === undefined ? undefined : { enableThinking: on };
    const toolsKey = this.lastTools?.tools === tools ? this.lastTools.key : JSON.stringify(tools);
    this.lastTools = { tools, key: toolsKey };
    this.calls++;
    const cur = this.current;
    if (!cur) {
      this.startSegment(messages, tools, toolsKey, codec.encodePrompt(messages, tools, thinking), thinking);
      return { kind: 'first' };
    }
    const order = this.segs.length === 1 ? [cur] : [cur, ...this.segs.filter((s) => s !== cur).reverse()];
    for (const seg of order) {
      if (!echoes(seg, messages, toolsKey)) continue;
      const added = messages.slice(seg.lastMessages.length + 1);
      seg.b.addContinuation(added, codec.encodeContinuation(added, seg.b.lastOutputIds, seg.thinking));
      return this.extended(seg, messages, toolsKey, 'messages');
    }
    const full = codec.encodePrompt(messages, tools, thinking);
    let finding: DriftFinding | null = null;
    for (const seg of order) {
      if (seg.lastTools !== toolsKey && seg !== cur) continue;
      const rel = continuationOf(this.turns, seg.b.promptIds, full);
      if (rel.kind === 'extends' && seg.lastTools === toolsKey) {
        seg.b.addContinuation(messages.slice(Math.min(messages.length, seg.lastMessages.length + 1)), full.slice(seg.b.length));
        return this.extended(seg, messages, toolsKey, 'tokens');
      }
      if (seg === cur && rel.kind === 'rewrite') finding = rel.finding;
    }
    finding ??= { turn: this.turns, position: cur.b.length, expected: full[cur.b.length] ?? null, actual: null };
    this.rewrites.push(finding);
    this.startSegment(messages, tools, toolsKey, full, thinking);
    return { kind: 'rewrite', finding };
  }

  /** Records the sampled turn and the assistant message the proxy answered with. */
  addTurn(turn: SampledTurn, assistant: Message): void {
    const seg = this.current!;
    seg.b.addTurn(turn, assistant);
    seg.lastAssistant = assistant;
    this.turns++;
  }

  /** The rollout's trajectory: one sequence, or the segments with `segments` (see the class comment). */
  build(): Trajectory {
    const merge = this.merge;
    if (this.segs.length === 0) return withContinuity(new TrajectoryBuilder().build(), [], 'token-exact', merge);
    const built = this.segs.map((s) => s.b.build());
    if (built.length === 1) return withContinuity(built[0]!, [], 'token-exact', merge);
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
    return withContinuity(out, this.rewrites, 'segmented', merge);
  }

  private extended(seg: Segment, messages: Message[], toolsKey: string, via: 'messages' | 'tokens'): Placement {
    const resumed = seg !== this.current;
    this.current = seg;
    seg.lastMessages = messages;
    seg.lastTools = toolsKey;
    seg.calls++;
    return resumed ? { kind: 'extend', via, resumed: true } : { kind: 'extend', via };
  }

  private startSegment(messages: Message[], tools: ToolSchema[], toolsKey: string, ids: number[], thinking: { enableThinking: boolean } | undefined): void {
    const b = new TrajectoryBuilder({ codec: this.opts.codec, detectDrift: this.opts.detectDrift, enableThinking: thinking?.enableThinking });
    b.start(messages, tools, ids);
    const seg: Segment = { b, thinking, lastMessages: messages, lastAssistant: null, lastTools: toolsKey, calls: 1 };
    this.segs.push(seg);
    this.current = seg;
  }
}

/** Whether `messages` are `seg`'s last request + the answer it got (as echoed) + new messages. */
function echoes(seg: Segment, messages: readonly Message[], toolsKey: string): boolean {
  const prev = seg.lastMessages;
  return toolsKey === seg.lastTools && seg.lastAssistant !== null && messages.length > prev.length + 1 && prefixMatches(messages, prev) && sameMessage(messages[prev.length]!, seg.lastAssistant);
}

/** Adds the drift detector's verdict — `continuity` (`token-exact` / `segmented`) and the rewrites found — and the merge report. */
function withContinuity(t: Trajectory, rewrites: DriftFinding[], continuity: 'token-exact' | 'segmented', merge: MergeReport): Trajectory {
  t.diagnostics = { ...t.diagnostics, continuity, rewrites, merge };
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
