import { createReadStream, statSync } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { ValidationError } from '../errors.js';
import type { ChatCodec } from '../llm/chat-codec.js';
import { codecFor } from '../llm/codec-registry.js';
import { RolloutEventSchema, type RolloutEvent, type RolloutState } from '../protocol/events.js';
import { RolloutResultSchema, type Outcome, type RolloutResult } from '../protocol/trajectory.js';
import type { EventsOptions, GroupHandle, RolloutHandle, RolloutSummary, RuntimeStatus } from '../runtime/runtime-api.js';
import type { ServiceRuntime } from './service-runtime.js';

/** The files `rollout run` writes in its output directory, and what a replay reads. */
export const RUN_FILES = { trajectories: 'trajectories.jsonl', events: 'events.jsonl', summary: 'summary.json' } as const;

/**
 * The codec a run tokenized with, as `summary.json` records it (`--tokenizer`, `--tool-parser`;
 * null: the default): a tokenizer directory as an absolute path, a hub name as given.
 */
export function runCodecRecord(tokenizer: string | undefined, toolParser: string | undefined): { tokenizer: string | null; tool_parser: string | null } {
  const isDir = tokenizer !== undefined && (statSync(tokenizer, { throwIfNoEntry: false })?.isDirectory() ?? false);
  return { tokenizer: tokenizer === undefined ? null : isDir ? resolve(tokenizer) : tokenizer, tool_parser: toolParser ?? null };
}

/**
 * The codec a recorded run was tokenized with, from its `summary.json`, loaded on first use (a
 * tokenizer takes about a second to load; only the token view needs it). Undefined when the file
 * does not say (a run recorded before it did) or the tokenizer cannot be loaded here any more
 * (`warn` says why): the token view then decodes with the default and says it assumed so.
 */
async function recordedCodec(dir: string, warn: (message: string) => void): Promise<() => ChatCodec | undefined> {
  let summary: unknown;
  try {
    summary = JSON.parse(await readFile(join(dir, RUN_FILES.summary), 'utf8'));
  } catch {
    return () => undefined;
  }
  const s = summary as { tokenizer?: unknown; tool_parser?: unknown } | null;
  if (s === null || typeof s !== 'object' || !('tokenizer' in s)) return () => undefined;
  const tokenizer = typeof s.tokenizer === 'string' ? s.tokenizer : undefined;
  const toolParser = typeof s.tool_parser === 'string' ? s.tool_parser : undefined;
  let made: { codec: ChatCodec | undefined } | undefined;
  return () => {
    if (made) return made.codec;
    try {
      made = { codec: codecFor({ tokenizer, toolParser }) };
    } catch (err) {
      warn(`the run's tokenizer ${tokenizer ?? ''} cannot be loaded (${(err as Error).message}); token texts are decoded with the default`);
      made = { codec: undefined };
    }
    return made.codec;
  };
}

/** A finished rollout's final state, from its outcome. */
const FINAL: Record<Outcome, RolloutState> = {
  completed: 'done',
  truncated: 'done',
  'timed-out': 'timedOut',
  cancelled: 'cancelled',
  'infra-error': 'failed',
  'task-error': 'failed',
};

/** What {@link openRunReplay} read, for the banner. */
export interface RunReplayInfo {
  rollouts: number;
  events: number;
  /** Lines of either file that did not parse (skipped, counted). */
  skipped: number;
}

/**
 * A finished run's output directory (`rollouts-out/<ts>/`) as a read-only {@link ServiceRuntime}:
 * its rollouts from `trajectories.jsonl`, its event stream replayed from `events.jsonl` with the
 * seq numbers it had live. Mounted in the ordinary service, the visualizer page, `/v1/rollouts`
 * and `/v1/events` work on it unchanged (`rollout view DIR`). Submitting is refused with a
 * ValidationError (400); cancelling finds nothing.
 *
 * @throws ValidationError naming the directory when it holds no `trajectories.jsonl`.
 */
export async function openRunReplay(dir: string, opts: { warn?: (message: string) => void } = {}): Promise<ServiceRuntime & { readonly replay: RunReplayInfo }> {
  const trajPath = join(dir, RUN_FILES.trajectories);
  if (!(await stat(trajPath).catch(() => null))?.isFile()) {
    throw new ValidationError(`${dir} is not a run's output directory: it has no ${RUN_FILES.trajectories} (rollout run writes one under rollouts-out/<timestamp>/)`, [{ path: 'DIR', message: `no ${RUN_FILES.trajectories}` }]);
  }
  let skipped = 0;
  const results = new Map<string, RolloutResult>();
  for await (const value of jsonLines(trajPath, () => skipped++)) {
    const r = RolloutResultSchema.safeParse(value);
    if (r.success) results.set(r.data.id, r.data);
    else skipped++;
  }
  const events: RolloutEvent[] = [];
  const eventsPath = join(dir, RUN_FILES.events);
  if ((await stat(eventsPath).catch(() => null))?.isFile()) {
    for await (const value of jsonLines(eventsPath, () => skipped++)) {
      const e = RolloutEventSchema.safeParse(value);
      if (e.success) events.push(e.data);
      else skipped++;
    }
  }
  events.sort((a, b) => a.seq - b.seq);
  // When each rollout was submitted: its first event, else the run's start as the result tells.
  const submitted = new Map<string, number>();
  for (const e of events) if (!submitted.has(e.rolloutId)) submitted.set(e.rolloutId, e.ts);
  const summaries = new Map<string, RolloutSummary>();
  for (const r of results.values()) {
    summaries.set(r.id, {
      id: r.id,
      instanceId: r.instanceId,
      groupId: r.groupId,
      trajectoryId: r.trajectoryId,
      dataSource: r.dataSource,
      state: FINAL[r.outcome],
      turn: r.trajectory.turns.length,
      tokens: r.trajectory.tokens.length,
      attempt: r.attempts,
      submittedAt: submitted.get(r.id) ?? 0,
      result: r,
    });
  }
  const outcomes: Record<string, number> = {};
  for (const r of results.values()) outcomes[r.outcome] = (outcomes[r.outcome] ?? 0) + 1;
  const idle = { active: 0, waiting: 0 };
  let state: RuntimeStatus['state'] = 'running';
  const closed = new AbortController();
  const readOnly = (): never => {
    throw new ValidationError('this is a read-only view of a finished run (rollout view): it runs nothing; submit to rollout serve instead', [{ path: 'instance', message: 'read-only view' }]);
  };

  const codec = await recordedCodec(dir, opts.warn ?? ((m) => void process.stderr.write(`warning: ${m}\n`)));

  return {
    replay: { rollouts: results.size, events: events.length, skipped },
    get codec() {
      return codec();
    },
    submit: (): RolloutHandle => readOnly(),
    submitGroup: (): GroupHandle => readOnly(),
    cancel: () => Promise.resolve(false),
    get: (id) => summaries.get(id),
    list(filter = {}) {
      return [...summaries.values()].filter((s) => (!filter.state || s.state === filter.state) && (!filter.groupId || s.groupId === filter.groupId) && (!filter.outcome || s.result?.outcome === filter.outcome));
    },
    events: (opts: EventsOptions = {}) => replayEvents(events, opts, (id) => results.get(id)?.groupId ?? null, closed.signal),
    status: (): RuntimeStatus => ({
      state,
      queued: 0,
      stages: { init: { ...idle, limit: 0 }, run: { ...idle, limit: 0 }, eval: { ...idle, limit: 0 } },
      live: 0,
      completed: results.size,
      outcomes,
      stuckCloses: 0,
    }),
    dataSources: () => [...new Set([...results.values()].map((r) => r.dataSource))],
    close() {
      state = 'closed';
      closed.abort();
      return Promise.resolve();
    },
  };
}

/**
 * The recorded events after `opts.after` (and of `opts.rolloutId` / `opts.groupId`), then — like
 * a live stream with nothing new — nothing until the subscriber or the view goes away.
 */
async function* replayEvents(events: readonly RolloutEvent[], opts: EventsOptions, groupOf: (rolloutId: string) => string | null, closed: AbortSignal): AsyncGenerator<RolloutEvent> {
  const after = opts.after ?? -1;
  for (const e of events) {
    if (opts.signal?.aborted || closed.aborted) return;
    if (e.seq <= after) continue;
    if (opts.rolloutId !== undefined && e.rolloutId !== opts.rolloutId) continue;
    if (opts.groupId !== undefined && groupOf(e.rolloutId) !== opts.groupId) continue;
    yield e;
  }
  await new Promise<void>((resolve) => {
    if (opts.signal?.aborted || closed.aborted) return resolve();
    opts.signal?.addEventListener('abort', () => resolve(), { once: true });
    closed.addEventListener('abort', () => resolve(), { once: true });
  });
}

/** Parsed JSON values of a JSON Lines file, one by one; `bad` counts a line that is not JSON. */
async function* jsonLines(path: string, bad: () => void): AsyncGenerator<unknown> {
  const lines = createInterface({ input: createReadStream(path, 'utf8'), crlfDelay: Infinity });
  for await (const line of lines) {
    if (line.trim() === '') continue;
    try {
      yield JSON.parse(line) as unknown;
    } catch {
      bad();
    }
  }
}
