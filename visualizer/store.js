// The page's data model: every rollout event folds into a Map of rollout records, per-second
// buckets for the charts, and incremental state counts. Pure (no DOM), so the render loop can
// read it once per animation frame however many events arrived in between.
// @ts-check

import { RewardStats } from './rewards.js';

/**
 * @typedef {import('./types.js').RolloutRecord} RolloutRecord
 * @typedef {import('./types.js').RolloutEvent} RolloutEvent
 * @typedef {import('./types.js').ServerMessage} ServerMessage
 * @typedef {import('./types.js').RolloutSummary} RolloutSummary
 * @typedef {import('./types.js').BackendSnapshot} BackendSnapshot
 */

/** States after which a rollout never changes. */
export const FINAL_STATES = new Set(['done', 'failed', 'timedOut', 'cancelled']);

/** Outcomes in the order the charts stack them. */
export const OUTCOMES = ['completed', 'truncated', 'timed-out', 'cancelled', 'infra-error', 'task-error'];

/**
 * The final state a rollout ends in for each outcome (as `rollout view` maps them too).
 * @type {Record<string, string | undefined>}
 */
export const FINAL_OF = { completed: 'done', truncated: 'done', 'timed-out': 'timedOut', cancelled: 'cancelled', 'infra-error': 'failed', 'task-error': 'failed' };

/** Rollout machine states in their usual order, for the filter and the state bar. */
export const STATES = ['queued', 'initializing', 'waitingRun', 'llmCalling', 'acting', 'waitingEval', 'evaluating', 'done', 'failed', 'timedOut', 'cancelled'];

export class Store {
  /**
   * @param {{ maxEventsPerRollout?: number, bucketMs?: number, maxBuckets?: number, maxRollouts?: number }} [opts]
   */
  constructor(opts = {}) {
    this.maxEventsPerRollout = opts.maxEventsPerRollout ?? 2000;
    this.bucketMs = opts.bucketMs ?? 1000;
    this.maxBuckets = opts.maxBuckets ?? 600;
    // Ended rollouts beyond this are forgotten oldest-first, so a long-lived tab stays bounded.
    this.maxRollouts = opts.maxRollouts ?? 20000;
    // The fields reset() sets, declared for the type checker (these statements do nothing).
    /* eslint-disable @typescript-eslint/no-unused-expressions -- JSDoc field declarations */
    /** @type {Map<string, RolloutRecord>} */ this.rollouts;
    /** @type {number} */ this.lastSeq;
    /** @type {Set<number>} */ this.missing;
    /** @type {string|null|undefined} */ this.epoch; // undefined after a hello without one
    /** @type {number} */ this.version;
    /** @type {number} */ this.chartVersion;
    /** @type {Map<number, {t: number, outcomes: Record<string, number>, llm: number, tools: number}>} */ this.buckets;
    /** @type {Record<string, number>} */ this.stateCounts;
    /** @type {Record<string, number>} */ this.outcomeCounts;
    /** @type {number} */ this.endedCount;
    /** @type {number} */ this.flaggedCount;
    /** @type {number} */ this.evicted;
    /** @type {number} */ this.windowFrom;
    /** @type {number} */ this.lostEvents;
    /** @type {number|null} */ this.firstSeq;
    /** @type {number|null} */ this.firstTs;
    /** @type {number|null} */ this.serverTotal;
    /** @type {number} */ this.serverSeq;
    /** @type {BackendSnapshot[]} */ this.backends;
    /** @type {Array<{ ts: number, load: Record<string, number> }>} */ this.backendHistory;
    /** @type {number} */ this.latestTs;
    /** @type {number} */ this.gaps;
    /** @type {number} */ this.eventsApplied;
    /** @type {RewardStats} */ this.rewards;
    /* eslint-enable @typescript-eslint/no-unused-expressions */
    this.reset();
  }

  /** Forgets everything (a server restart: a new epoch means seq starts over). */
  reset() {
    this.rollouts = new Map();
    // The runtime numbers events from 1, so `after: 0` replays everything it still retains.
    this.lastSeq = 0;
    /** Seqs of a gap being replayed: accepted although below lastSeq. */
    this.missing = new Set();
    this.epoch = null;
    /** Bumped whenever a table-visible field of any rollout changes. */
    this.version = 0;
    /** Bumped whenever the chart data changes. */
    this.chartVersion = 0;
    /** @type {Map<number, {t: number, outcomes: Record<string, number>, llm: number, tools: number}>} */
    this.buckets = new Map();
    /** @type {Record<string, number>} */
    this.stateCounts = Object.fromEntries(STATES.map((s) => [s, 0]));
    /**
     * Rollouts by outcome, counted per rollout record (set, changed or forgotten with it): the
     * one source of every "ended" figure on the page. A rollout has ended when it has an outcome.
     * @type {Record<string, number>}
     */
    this.outcomeCounts = Object.fromEntries(OUTCOMES.map((o) => [o, 0]));
    /** Rollouts with an outcome (the sum of outcomeCounts). */
    this.endedCount = 0;
    /** Rollouts whose result carries integrity violations (#27). */
    this.flaggedCount = 0;
    /** Ended rollouts this page forgot to stay bounded (maxRollouts). */
    this.evicted = 0;
    /**
     * The first seq the server still retained when this page subscribed from the start (a
     * `gap` of reason `retention` on the first subscription): earlier events are not shown.
     */
    this.windowFrom = 1;
    /** Events lost to this page (a resume or a gap replay the server could not serve). */
    this.lostEvents = 0;
    /** The smallest event seq and timestamp folded in: where the page's window starts. */
    this.firstSeq = null;
    this.firstTs = null;
    /** The server's count of rollouts it lists (GET /v1/rollouts `total`), when known. */
    this.serverTotal = null;
    /** The latest seq the server announced (hello) or sent: how many events it has emitted. */
    this.serverSeq = 0;
    /** Latest backend snapshot. */
    this.backends = [];
    /** Recent snapshots: {ts, load: {id: inFlight}}. */
    this.backendHistory = [];
    this.latestTs = 0;
    this.gaps = 0;
    this.eventsApplied = 0;
    /** Rewards per data source and over time, and GRPO groups (the alias map outlives a reset). */
    const families = this.rewards?.families;
    this.rewards = new RewardStats();
    if (families) this.rewards.families = families;
  }

  /**
   * @param {string} id
   * @param {number} ts
   * @returns {RolloutRecord}
   */
  _rollout(id, ts) {
    let r = this.rollouts.get(id);
    if (r === undefined) {
      r = {
        id,
        dataSource: '',
        instanceId: null,
        groupId: null,
        trajectoryId: null,
        attempt: 0,
        /** Attempts that ended in a retry (rollout.retry events). */
        retries: 0,
        state: 'queued',
        turn: 0,
        tokens: 0,
        submittedTs: ts,
        lastTs: ts,
        /** When it entered its current state: a live rollout long in one state is stuck. */
        stateTs: ts,
        endTs: null,
        outcome: null,
        reward: null,
        finish: null,
        error: null,
        /** Integrity violations by kind (#27), or null when none were reported. */
        violations: null,
        /** False when the end time is not known (a rollout seeded from the listing without it). */
        elapsedKnown: true,
        events: [],
        droppedEvents: 0,
        version: 0,
        /** Whether its result is counted in the reward aggregates (once per rollout). */
        rewardCounted: false,
      };
      this.rollouts.set(id, r);
      this.stateCounts[r.state] = (this.stateCounts[r.state] ?? 0) + 1;
      if (this.rollouts.size > this.maxRollouts) this._evict();
    }
    return r;
  }

  _evict() {
    for (const [id, r] of this.rollouts) {
      if (r.endTs === null) continue;
      this.rollouts.delete(id);
      this.stateCounts[r.state] -= 1;
      this._setOutcome(r, null);
      this._setViolations(r, null);
      this.rewards.remove(r);
      this.evicted++;
      if (this.rollouts.size <= this.maxRollouts) return;
    }
  }

  /** @param {number} ts */
  _bucket(ts) {
    const key = Math.floor(ts / this.bucketMs);
    let b = this.buckets.get(key);
    if (b === undefined) {
      b = { t: key * this.bucketMs, outcomes: {}, llm: 0, tools: 0 };
      this.buckets.set(key, b);
      if (this.buckets.size > this.maxBuckets) {
        const oldest = this.buckets.keys().next().value;
        if (oldest !== undefined) this.buckets.delete(oldest);
      }
    }
    return b;
  }

  /**
   * Sets a rollout's outcome, keeping outcomeCounts and endedCount per rollout.
   * @param {RolloutRecord} r
   * @param {string|null} outcome
   */
  _setOutcome(r, outcome) {
    if (r.outcome === outcome) return;
    if (r.outcome !== null) {
      this.outcomeCounts[r.outcome] = (this.outcomeCounts[r.outcome] ?? 1) - 1;
      this.endedCount--;
    }
    if (outcome !== null) {
      this.outcomeCounts[outcome] = (this.outcomeCounts[outcome] ?? 0) + 1;
      this.endedCount++;
    }
    r.outcome = outcome;
    this.chartVersion++;
  }

  /**
   * @param {RolloutRecord} r
   * @param {Record<string, number>|null} violations
   */
  _setViolations(r, violations) {
    /** @param {Record<string, number>|null} v */
    const flagged = (v) => v !== null && Object.values(v).some((n) => n > 0);
    const was = flagged(r.violations);
    r.violations = violations && typeof violations === 'object' && flagged(violations) ? violations : null;
    this.flaggedCount += (r.violations !== null ? 1 : 0) - (was ? 1 : 0);
  }

  /**
   * Whether a rollout has ended: it has an outcome (the same test for every count).
   * @param {{ outcome: string|null }} r
   */
  static ended(r) {
    return r.outcome !== null;
  }

  /**
   * @param {RolloutRecord} r
   * @param {string} state
   * @param {number} [ts]
   */
  _setState(r, state, ts) {
    if (ts !== undefined) r.stateTs = ts;
    if (r.state === state) return;
    this.stateCounts[r.state] = (this.stateCounts[r.state] ?? 1) - 1;
    this.stateCounts[state] = (this.stateCounts[state] ?? 0) + 1;
    r.state = state;
  }

  /**
   * Folds one server message in. Accepts the service's envelope (`{type:'event', event}`),
   * bare rollout events, `backends`, `gap`, `hello` and `heartbeat`; ignores anything else.
   * Returns the rollout the message changed, or null.
   * @param {ServerMessage | null} msg
   * @returns {RolloutRecord | null}
   */
  apply(msg) {
    if (msg === null || typeof msg !== 'object') return null;
    switch (msg.type) {
      case 'event':
        return this.applyEvent(msg.event);
      case 'hello':
        // seq restarts with each runtime epoch: a different epoch is a different history.
        if (this.epoch !== null && msg.epoch !== this.epoch) this.reset();
        this.epoch = msg.epoch;
        if (typeof msg.seq === 'number') this.serverSeq = Math.max(this.serverSeq, msg.seq);
        return null;
      case 'heartbeat':
        if (typeof msg.ts === 'number') this.latestTs = Math.max(this.latestTs, msg.ts);
        return null;
      case 'gap':
        this.applyGap(msg);
        return null;
      case 'backends':
        this.applyBackends(msg.ts ?? this.latestTs, msg.backends ?? []);
        return null;
      default:
        if (typeof msg.type === 'string' && typeof msg.rolloutId === 'string') return this.applyEvent(/** @type {RolloutEvent} */ (msg));
        return null;
    }
  }

  /**
   * A gap in the stream. Events before the server's retention on a subscription from the start
   * are no loss: they set where the page's window starts (said on the page). A gap the page
   * cannot fill — a resume or a gap replay that reached past the retention — is a loss, and the
   * amber warning counts it. Slow-client gaps are replayed by the page (app.js), so they are not
   * counted here.
   * @param {{ from?: number, to?: number, reason?: string }} msg
   * @param {{ fromStart?: boolean }} [opts] the gap is on a subscription that asked for everything
   */
  applyGap(msg, opts = {}) {
    if (typeof msg.to !== 'number' || msg.to < 1) return;
    if (msg.reason === 'slow-client') return;
    const from = typeof msg.from === 'number' ? msg.from : 1;
    if (opts.fromStart !== false && from <= 1 && this.lastSeq === 0) {
      this.windowFrom = Math.max(this.windowFrom, msg.to + 1);
      this.version++;
      return;
    }
    this.gaps += 1;
    this.lostEvents += msg.to - from + 1;
    this.version++;
  }

  /**
   * @param {number} ts
   * @param {BackendSnapshot[]} backends
   */
  applyBackends(ts, backends) {
    this.backends = backends;
    /** @type {Record<string, number>} */
    const load = {};
    for (const b of backends) load[b.id] = b.inFlight;
    this.backendHistory.push({ ts, load });
    if (this.backendHistory.length > 300) this.backendHistory.shift();
    this.chartVersion++;
  }

  /**
   * Folds one rollout event in. Events at or before the last seq seen are ignored (a resume
   * overlap), unless they fill a gap announced with {@link Store#expect}: those are inserted in
   * seq order and their rollout is re-folded from its events.
   * @param {RolloutEvent | null | undefined} ev
   * @returns {RolloutRecord | null}
   */
  applyEvent(ev) {
    if (ev === null || typeof ev !== 'object' || typeof ev.rolloutId !== 'string') return null;
    let late = false;
    if (typeof ev.seq === 'number') {
      if (ev.seq <= this.lastSeq) {
        if (!this.missing.delete(ev.seq)) return null;
        late = true;
      } else this.lastSeq = ev.seq;
      if (ev.seq > this.serverSeq) this.serverSeq = ev.seq;
    }
    const ts = typeof ev.ts === 'number' ? ev.ts : this.latestTs;
    if (ts > this.latestTs) this.latestTs = ts;
    if (typeof ev.seq === 'number' && (this.firstSeq === null || ev.seq < this.firstSeq)) this.firstSeq = ev.seq;
    if (this.firstTs === null || ts < this.firstTs) this.firstTs = ts;
    const r = this._rollout(ev.rolloutId, ts);
    if (r.seeded) {
      // Events are the better source: forget the listing's guesses (its end time above all).
      r.seeded = false;
      r.endTs = null;
      r.elapsedKnown = true;
    }
    this.eventsApplied++;
    r.version++;
    this._count(ev, ts);
    if (late) {
      let i = r.events.length;
      while (i > 0 && /** @type {number} */ (r.events[i - 1]?.seq) > /** @type {number} */ (ev.seq)) i--;
      r.events.splice(i, 0, ev);
      this._refold(r);
    } else {
      if (r.events.length >= this.maxEventsPerRollout) {
        r.events.shift();
        r.droppedEvents++;
      }
      r.events.push(ev);
      this._fold(r, ev, ts);
    }
    if (ev.type === 'rollout.submitted') this.rewards.join(r);
    if (ev.type === 'rollout.result') this._countReward(r, ts);
    this.version++;
    return r;
  }

  /**
   * Announces that events `from..to` were not delivered and will be asked for again: they are
   * then accepted although older than the last seq seen. Ranges past `maxMissing` are not kept.
   * @param {number} from
   * @param {number} to
   */
  expect(from, to, maxMissing = 100_000) {
    for (let seq = Math.max(1, from); seq <= to && this.missing.size < maxMissing; seq++) {
      if (seq <= this.lastSeq) this.missing.add(seq);
    }
  }

  /**
   * Counters across rollouts (charts): once per event, whenever it arrives.
   * @param {RolloutEvent} ev
   * @param {number} ts
   */
  _count(ev, ts) {
    switch (ev.type) {
      case 'llm.end':
        this._bucket(ts).llm++;
        this.chartVersion++;
        break;
      case 'tool.result':
        this._bucket(ts).tools++;
        this.chartVersion++;
        break;
      case 'rollout.result': {
        // Per-second outcomes feed the throughput chart (a rate); totals are per rollout (_setOutcome).
        const b = this._bucket(ts);
        const outcome = String(ev.outcome);
        b.outcomes[outcome] = (b.outcomes[outcome] ?? 0) + 1;
        this.chartVersion++;
        break;
      }
      default:
        break;
    }
  }

  /**
   * @param {RolloutRecord} r
   * @param {number} ts
   */
  _countReward(r, ts) {
    if (r.rewardCounted) return;
    r.rewardCounted = true;
    this.rewards.add(r, ts);
    this.chartVersion++;
  }

  /**
   * A rollout's own fields from one of its events, in order.
   * @param {RolloutRecord} r
   * @param {RolloutEvent} ev
   * @param {number} ts
   */
  _fold(r, ev, ts) {
    r.lastTs = Math.max(r.lastTs, ts);
    switch (ev.type) {
      case 'rollout.submitted':
        r.dataSource = ev.dataSource ?? '';
        r.instanceId = ev.instanceId ?? null;
        r.groupId = ev.groupId ?? null;
        r.trajectoryId = ev.trajectoryId ?? null;
        // Tree rollouts (#26): a branch's parent and fork turn (visualizer/tree.js).
        r.parentId = ev.parentId ?? null;
        r.branchTurn = ev.branchTurn ?? null;
        r.attempt = ev.attempt ?? 0;
        // A retry announces its attempt with a fresh `rollout.submitted`: the rollout's elapsed
        // time still counts from its first submission.
        if ((ev.attempt ?? 1) <= 1) r.submittedTs = ts;
        r.stateTs = ts;
        break;
      case 'rollout.state':
        // A state event always names its state (the runtime's schema).
        this._setState(r, /** @type {string} */ (ev.state), ts);
        r.turn = ev.turn ?? r.turn;
        if (FINAL_STATES.has(/** @type {string} */ (ev.state)) && r.endTs === null) r.endTs = ts;
        break;
      case 'llm.start':
        r.turn = /** @type {number} */ (ev.turn);
        break;
      case 'llm.end':
        r.tokens = Math.max(r.tokens, (ev.promptTokens ?? 0) + (ev.outputTokens ?? 0));
        break;
      case 'rollout.retry':
        // The failed attempt's final state was not the rollout's end: it waits for another one.
        r.attempt = ev.attempt ?? r.attempt;
        r.retries++;
        r.endTs = null;
        this._setState(r, 'queued', ts);
        break;
      case 'rollout.result':
        this._setOutcome(r, ev.outcome ?? null);
        this._setViolations(r, ev.violations ?? null);
        // A rollout cancelled (or timed out) while waiting for a retry gets no state event.
        if (!FINAL_STATES.has(r.state) && FINAL_OF[String(ev.outcome)]) this._setState(r, /** @type {string} */ (FINAL_OF[String(ev.outcome)]), ts);
        r.elapsedKnown = true;
        r.reward = ev.reward ?? null;
        r.finish = ev.finish ?? null;
        // A result's error is a SerializedError (a boolean only on tool.result).
        r.error = /** @type {import('./types.js').SerializedError | null} */ (ev.error ?? null);
        r.tokens = ev.tokens ?? r.tokens;
        r.turn = ev.turns ?? r.turn;
        if (r.endTs === null) r.endTs = ts;
        break;
      default:
        break;
    }
  }

  /**
   * Rebuilds a rollout's fields from its events, after one arrived out of order.
   * @param {RolloutRecord} r
   */
  _refold(r) {
    const first = r.events[0];
    this._setState(r, 'queued', first?.ts);
    this._setOutcome(r, null);
    this._setViolations(r, null);
    Object.assign(r, { turn: 0, tokens: 0, retries: 0, endTs: null, reward: null, finish: null, error: null, lastTs: first?.ts ?? r.lastTs });
    for (const ev of r.events) this._fold(r, ev, typeof ev.ts === 'number' ? ev.ts : r.lastTs);
  }

  /**
   * Adds a rollout known only from `GET /v1/rollouts` (its events are past the server's
   * retention). A rollout already known from events is left alone: events are fresher.
   * @param {RolloutSummary | null} summary
   */
  seed(summary) {
    if (summary === null || typeof summary !== 'object' || typeof summary.id !== 'string' || this.rollouts.has(summary.id)) return;
    const r = this._rollout(summary.id, summary.submitted_at ?? 0);
    r.dataSource = summary.data_source ?? '';
    r.instanceId = summary.instance_id ?? null;
    r.groupId = summary.group_id ?? null;
    r.trajectoryId = summary.trajectory_id ?? null;
    r.parentId = summary.parent_id ?? null;
    r.branchTurn = summary.branch_turn ?? null;
    r.attempt = summary.attempt ?? 0;
    r.turn = summary.turn ?? 0;
    r.tokens = summary.tokens ?? 0;
    this._setOutcome(r, typeof summary.outcome === 'string' ? summary.outcome : null);
    this._setViolations(r, summary.violations ?? null);
    r.reward = summary.reward ?? null;
    if (typeof summary.state === 'string') this._setState(r, summary.state);
    const final = r.outcome === null ? undefined : FINAL_OF[r.outcome];
    if (r.outcome !== null && !FINAL_STATES.has(r.state) && final) this._setState(r, final);
    if (r.outcome !== null || FINAL_STATES.has(r.state)) {
      // The listing gives the wall time of a result; without it the elapsed time is unknown
      // (shown as –, never as a made-up 0).
      const wall = typeof summary.wall_ms === 'number' && Number.isFinite(summary.wall_ms) ? summary.wall_ms : null;
      r.endTs = r.submittedTs + (wall ?? 0);
      r.elapsedKnown = wall !== null;
    }
    if (this.firstTs === null || r.submittedTs < this.firstTs) this.firstTs = r.submittedTs;
    r.seeded = true;
    if (r.outcome !== null) this._countReward(r, r.submittedTs);
    else this.rewards.join(r);
    this.version++;
  }

  /**
   * Sorts rollouts in place by a table column; `now` (runtime clock) gives live rollouts their
   * elapsed time. Ties keep arrival order (Array.prototype.sort is stable).
   * @param {RolloutRecord[]} list
   * @param {string} key id | task | state | turn | tokens | elapsed | outcome | reward
   * @param {1|-1} dir
   * @param {number} now
   */
  static sort(list, key, dir, now) {
    /** @type {Record<string, ((r: RolloutRecord) => string | number) | undefined>} */
    const columns = {
      id: (r) => r.id,
      task: (r) => Store.taskOf(r),
      state: (r) => STATES.indexOf(r.state),
      turn: (r) => r.turn,
      tokens: (r) => r.tokens,
      elapsed: (r) => (r.endTs ?? now) - r.submittedTs,
      outcome: (r) => r.outcome ?? '',
      reward: (r) => r.reward ?? -Infinity,
    };
    const value = columns[key];
    if (value === undefined) return list;
    return list.sort((a, b) => {
      const x = value(a);
      const y = value(b);
      return (x < y ? -1 : x > y ? 1 : 0) * dir;
    });
  }

  /**
   * A readable task label: the data source and instance id.
   * @param {{ dataSource: string, instanceId: string|null }} r
   */
  static taskOf(r) {
    if (r.instanceId) return r.dataSource ? `${r.dataSource}/${r.instanceId}` : r.instanceId;
    return r.dataSource;
  }

  /**
   * The rollouts passing the filters, in arrival order.
   * @param {{ state?: string, outcome?: string, task?: string, flagged?: boolean }} f
   */
  filter(f) {
    const task = (f.task ?? '').trim().toLowerCase();
    const out = [];
    for (const r of this.rollouts.values()) {
      if (f.state) {
        if (f.state === 'live' ? Store.ended(r) : f.state === 'ended' ? !Store.ended(r) : r.state !== f.state) continue;
      }
      if (f.flagged && r.violations === null) continue;
      if (f.outcome) {
        if (f.outcome === 'none' ? r.outcome !== null : r.outcome !== f.outcome) continue;
      }
      if (task && !Store.taskOf(r).toLowerCase().includes(task) && !r.id.toLowerCase().includes(task) && !(r.groupId ?? '').toLowerCase().includes(task)) continue;
      out.push(r);
    }
    return out;
  }
}
