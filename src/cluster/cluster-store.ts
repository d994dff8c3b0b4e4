import { violationCounts } from '../protocol/integrity.js';
import { Redis } from 'ioredis';
import type { RolloutEvent, RolloutState } from '../protocol/events.js';
import { RolloutResultSchema, type RolloutResult } from '../protocol/trajectory.js';
import { RolloutEventSchema } from '../protocol/events.js';
import type { ClusterKeys } from './cluster-keys.js';
import type { ClusterOptions } from './cluster-options.js';

/**
 * Appends one event: the global seq is an INCR, used as the stream entry id (`<seq>-0`), so the
 * stream is ordered by seq and a resume cursor is an XRANGE bound. The per-rollout rseq is its
 * own counter, so it keeps counting when a rollout moves to another worker.
 * KEYS: events, seq, rseq, summary. ARGV: json, maxlen, ttl, type, state, turn, group, attempt.
 */
const APPEND_LUA = `
local seq = redis.call('INCR', KEYS[2])
local rseq = redis.call('INCR', KEYS[3])
redis.call('EXPIRE', KEYS[3], ARGV[3])
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], seq .. '-0', 'e', ARGV[1], 'r', rseq, 'g', ARGV[7])
if redis.call('HEXISTS', KEYS[4], 'final') == 0 then
  if ARGV[4] == 'rollout.state' then
    redis.call('HSET', KEYS[4], 'state', ARGV[5], 'turn', ARGV[6])
    redis.call('EXPIRE', KEYS[4], ARGV[3])
  elseif ARGV[4] == 'rollout.submitted' then
    redis.call('HSET', KEYS[4], 'state', 'queued', 'attempt', ARGV[8], 'meta', ARGV[1])
    redis.call('EXPIRE', KEYS[4], ARGV[3])
  end
end
return seq
`;

/**
 * Commits a rollout's result once: SET NX decides the one result the trainer gets (a stalled
 * job's late completion on another worker loses here). Only the winner appends the
 * `rollout.result` event and tells every worker to drop a duplicate run of the same rollout.
 * KEYS: result, events, seq, rseq, summary. ARGV: result json, ttl, event json, maxlen, group,
 * final state, control channel, control message. Answers the event's seq, or 0 when a result
 * was already there.
 */
const COMMIT_LUA = `
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then return 0 end
local seq = redis.call('INCR', KEYS[3])
local rseq = redis.call('INCR', KEYS[4])
redis.call('EXPIRE', KEYS[4], ARGV[2])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], seq .. '-0', 'e', ARGV[3], 'r', rseq, 'g', ARGV[5])
redis.call('HSET', KEYS[5], 'state', ARGV[6], 'final', '1')
redis.call('EXPIRE', KEYS[5], ARGV[2])
redis.call('PUBLISH', ARGV[7], ARGV[8])
return seq
`;

interface Scripts {
  rrAppend(...args: (string | number)[]): Promise<number>;
  rrCommit(...args: (string | number)[]): Promise<number>;
}

/** The same scripts queued on a pipeline: a call returns the pipeline; results come from `exec()`. */
interface PipelineScripts {
  rrAppend(...args: (string | number)[]): unknown;
}

/** One event read back from the stream, with its group for filtering. */
export interface StoredEvent {
  ev: RolloutEvent;
  groupId: string | null;
}

/** A rollout's summary hash, as stored. */
export interface StoredSummary {
  state: RolloutState;
  turn: number;
  attempt: number;
  /** The `rollout.submitted` event (instance id, trajectory, data source). */
  meta: Record<string, unknown> | null;
}

/** The machine state a result's outcome ends in. */
export function finalState(outcome: RolloutResult['outcome']): RolloutState {
  switch (outcome) {
    case 'completed':
    case 'truncated':
      return 'done';
    case 'timed-out':
      return 'timedOut';
    case 'cancelled':
      return 'cancelled';
    default:
      return 'failed';
  }
}

/** The `rollout.result` event of a result, as the embedded runtime emits it (less seq/rseq). */
export function resultEvent(r: RolloutResult, ts: number): Omit<Extract<RolloutEvent, { type: 'rollout.result' }>, 'seq' | 'rseq'> {
  return {
    type: 'rollout.result',
    rolloutId: r.id,
    ts,
    outcome: r.outcome,
    finish: r.finish,
    reward: r.reward,
    resolved: r.resolved,
    error: r.error,
    timing: r.timing,
    tokens: r.trajectory.tokens.length,
    turns: r.trajectory.turns.length,
    ...(r.integrity?.violations.length ? { violations: violationCounts(r.integrity.violations) } : {}),
  };
}

/**
 * Redis access shared by the gateway and the workers: the event stream, results, summaries.
 * Every value read back is validated (another process wrote it). Owns nothing but the script
 * definitions on the connection it is given.
 */
export class ClusterStore {
  private readonly scripts: Scripts;

  constructor(
    readonly redis: Redis,
    readonly keys: ClusterKeys,
    private readonly opts: ClusterOptions,
  ) {
    redis.defineCommand('rrAppend', { numberOfKeys: 4, lua: APPEND_LUA });
    redis.defineCommand('rrCommit', { numberOfKeys: 5, lua: COMMIT_LUA });
    this.scripts = redis as unknown as Scripts;
  }

  /** Appends events in one pipeline (one round trip), in order. */
  async appendMany(items: { ev: RolloutEvent; groupId: string | null }[]): Promise<void> {
    const p = this.redis.pipeline();
    const k = this.keys;
    for (const { ev, groupId } of items) {
      const { seq: _s, rseq: _r, ...rest } = ev;
      const state = ev.type === 'rollout.state' ? ev.state : '';
      const turn = ev.type === 'rollout.state' ? ev.turn : 0;
      const attempt = ev.type === 'rollout.submitted' ? ev.attempt : 0;
      (p as unknown as PipelineScripts).rrAppend(
        k.events, k.seq, k.rseq(ev.rolloutId), k.summary(ev.rolloutId),
        JSON.stringify(rest), this.opts.eventsMaxLen, this.opts.resultTtlSec, ev.type, state, turn, groupId ?? '', attempt,
      );
    }
    const res = await p.exec();
    const failed = res?.find(([err]) => err);
    if (failed) throw failed[0]!;
  }

  /** Commits a result unless one is there; true when this one won. */
  async commit(result: RolloutResult, ts: number): Promise<boolean> {
    const k = this.keys;
    const seq = await this.scripts.rrCommit(
      k.result(result.id), k.events, k.seq, k.rseq(result.id), k.summary(result.id),
      JSON.stringify(result), this.opts.resultTtlSec, JSON.stringify(resultEvent(result, ts)), this.opts.eventsMaxLen,
      result.groupId ?? '', finalState(result.outcome), k.control, JSON.stringify({ type: 'cancel', id: result.id, reason: 'result committed' }),
    );
    return seq > 0;
  }

  /** The committed result, or null. */
  async result(id: string): Promise<RolloutResult | null> {
    const raw = await this.redis.get(this.keys.result(id));
    return raw === null ? null : parseResult(raw);
  }

  /** Committed results of many ids (null where none), in one round trip. */
  async results(ids: string[]): Promise<(RolloutResult | null)[]> {
    if (ids.length === 0) return [];
    const raws = await this.redis.mget(ids.map((id) => this.keys.result(id)));
    return raws.map((r) => (r === null ? null : parseResult(r)));
  }

  /** A rollout's summary hash, or null when Redis has none (unknown, or expired). */
  async summary(id: string): Promise<StoredSummary | null> {
    const h = await this.redis.hgetall(this.keys.summary(id));
    if (!h['state']) return null;
    let meta: Record<string, unknown> | null = null;
    try {
      meta = h['meta'] ? (JSON.parse(h['meta']) as Record<string, unknown>) : null;
    } catch {
      meta = null;
    }
    return { state: h['state'] as RolloutState, turn: Number(h['turn'] ?? 0), attempt: Number(h['attempt'] ?? 0), meta };
  }

  /** The last seq handed out (0 before any event). */
  async lastSeq(): Promise<number> {
    return Number((await this.redis.get(this.keys.seq)) ?? 0);
  }

  /** Events with `after < seq <= upTo` still in the stream, up to `count`, in seq order. */
  async range(after: number, upTo: number, count: number): Promise<StoredEvent[]> {
    const rows = await this.redis.xrange(this.keys.events, `(${after}-0`, `${upTo}-0`, 'COUNT', count);
    return parseEntries(rows);
  }

  /** The oldest seq still in the stream (null when empty). */
  async oldestSeq(): Promise<number | null> {
    const rows = await this.redis.xrange(this.keys.events, '-', '+', 'COUNT', 1);
    return rows.length ? seqOf(rows[0]![0]) : null;
  }
}

/** Reads events after `after`, blocking up to `blockMs`; on a dedicated connection. */
export async function readAfter(redis: Redis, stream: string, after: number, blockMs: number, count = 1000): Promise<StoredEvent[]> {
  const res = (await redis.xread('COUNT', count, 'BLOCK', blockMs, 'STREAMS', stream, `${after}-0`)) as [string, [string, string[]][]][] | null;
  if (!res) return [];
  return parseEntries(res[0]![1]);
}

function seqOf(id: string): number {
  return Number(id.slice(0, id.indexOf('-')));
}

function parseEntries(rows: [string, string[]][]): StoredEvent[] {
  const out: StoredEvent[] = [];
  for (const [id, fields] of rows) {
    const f: Record<string, string> = {};
    for (let i = 0; i + 1 < fields.length; i += 2) f[fields[i]!] = fields[i + 1]!;
    let body: unknown;
    try {
      body = { ...(JSON.parse(f['e'] ?? 'null') as object), seq: seqOf(id), rseq: Number(f['r']) };
    } catch {
      continue;
    }
    const r = RolloutEventSchema.safeParse(body);
    // An entry another version wrote differently is skipped, not fatal: events are observation.
    if (!r.success) continue;
    out.push({ ev: r.data, groupId: f['g'] ? f['g'] : null });
  }
  return out;
}

function parseResult(raw: string): RolloutResult | null {
  try {
    const r = RolloutResultSchema.safeParse(JSON.parse(raw));
    return r.success ? r.data : null;
  } catch {
    return null;
  }
}
