// The visualizer page: one WebSocket to /v1/events folds every message into the Store as it
// arrives (cheap), and one requestAnimationFrame callback renders whatever changed since the
// last frame (the expensive part), so a burst of events from 1,000 live rollouts costs one
// render per frame, not one per event. The table is virtualized: only the rows in view exist.
// @ts-check

import { Store, OUTCOMES, STATES } from './store.js';
import { renderGraph } from './graph.js';
import { renderTimeline } from './timeline.js';
import { TerminalReplay, bashSteps } from './terminal.js';
import { drawThroughput, drawBackends, drawSplitBar, drawRewardHistogram, drawRewardOverTime, outcomeCountsByReward, REWARD_OUTCOME_COLORS } from './charts.js';
import { fmtElapsed, fmtReward, fmtViolations, violationTotal } from './format.js';
import { renderGroup, renderEval, toJsonl, download } from './panels.js';
import { renderTokenView } from './tokens.js';
import { createGroupsTable } from './groups-table.js';
import { createTrends } from './trends.js';
import { renderTree } from './tree.js';

/**
 * @typedef {import('./types.js').RolloutRecord} RolloutRecord
 * @typedef {import('./types.js').ServerMessage} ServerMessage
 * @typedef {{ role: string, name?: string, content?: string|null, tool_calls?: Array<{ name: string, arguments: unknown }> }} ChatMessage
 * @typedef {{ name: string, arguments: unknown }} ToolCall
 * @typedef {import('./panels.js').RolloutResult & { trajectory?: import('./tokens.js').Trajectory & { messages?: unknown } }} ResultJson
 *   a RolloutResult as the server sends it (JSON, read defensively)
 * @typedef {ResultJson & { unavailable?: boolean, result?: ResultJson, messages?: unknown }} ResultBody
 *   a `GET /v1/rollouts/:id` answer: `{ result }`, the result itself, or `{ unavailable }` when it failed
 * @typedef {HTMLDivElement & { _key?: string|null }} TableRow a pooled row, with the key of what it shows
 */

const params = new URLSearchParams(location.search);
/** Where the HTTP API lives; the page's own origin unless `?api=` says otherwise. */
const apiBase = (params.get('api') ?? location.origin).replace(/\/$/, '');
/** A bearer token for a server started with --token (browsers cannot set WebSocket headers). */
const token = params.get('token');
const wsBase = params.get('ws') ?? `${apiBase.replace(/^http/, 'ws')}/v1/events`;
const wsUrl = token ? `${wsBase}${wsBase.includes('?') ? '&' : '?'}token=${encodeURIComponent(token)}` : wsBase;
/** @type {Record<string, string>} */
const apiHeaders = token ? { authorization: `Bearer ${token}` } : {};
/** A live rollout this long in one state is flagged as stuck (`?stuck=` seconds, default 60). */
const STUCK_MS = Number(params.get('stuck') ?? 60) * 1000;
const ROW_H = 24;
const OVERSCAN = 6;
const CHART_INTERVAL_MS = 250;
/** @type {Record<string, string>} */
const STATE_COLORS = {
  queued: '#6e7681', initializing: '#39c5cf', waitingRun: '#484f58', llmCalling: '#1f6feb', acting: '#8957e5',
  waitingEval: '#30363d', evaluating: '#1b7c83', done: '#3fb950', failed: '#f85149', timedOut: '#db6d28', cancelled: '#8b949e',
};

/** @param {string} id */
const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));
/** @param {string} id */
const $canvas = (id) => /** @type {HTMLCanvasElement} */ (document.getElementById(id));
const store = new Store();
/** Frame-work figures, read by the browser test. */
const stats = { frames: 0, frameMsMax: 0, frameMsTotal: 0, recentFrameMs: /** @type {number[]} */ ([]), messages: 0, connects: 0, renderedRows: 0 };

const ui = {
  rows: $('rows'),
  spacer: $('rows-spacer'),
  rowCount: $('row-count'),
  counts: $('counts'),
  conn: $('conn'),
  gaps: $('gaps'),
  stuck: $('stuck'),
  notice: $('notice'),
  detail: $('detail'),
  filterState: /** @type {HTMLSelectElement} */ ($('filter-state')),
  filterOutcome: /** @type {HTMLSelectElement} */ ($('filter-outcome')),
  filterTask: /** @type {HTMLInputElement} */ ($('filter-task')),
  firstRun: $('first-run'),
  window: addWindowLine(),
  filterFlagged: addFlaggedFilter(),
};

/** The line saying which part of the run the page covers (#30: never a silent recent window). */
function addWindowLine() {
  const span = document.createElement('span');
  span.id = 'window';
  span.className = 'window';
  $('counts').after(span);
  return span;
}

/** "show flagged rollouts": only rollouts whose result has integrity violations (#27). */
function addFlaggedFilter() {
  const label = document.createElement('label');
  label.className = 'flag-filter';
  label.title = 'rollouts whose result.integrity lists violations (tampering with tests, reading secrets, denied programs)';
  const box = document.createElement('input');
  box.type = 'checkbox';
  box.id = 'filter-flagged';
  label.append(box, ' show flagged rollouts');
  $('row-count').before(label);
  return box;
}
$('first-run-curl').textContent = `curl -X POST ${apiBase}/v1/rollouts -H 'content-type: application/json'${token ? ` -H 'authorization: Bearer …'` : ''} \\
  -d '{"instance": {"data_source": "math", "instance_id": "q1", "question": "1+1?", "answer": "2"}}'`;
const groupsTable = createGroupsTable($('groups-table'));
const trends = createTrends({ reward: /** @type {HTMLCanvasElement} */ ($('chart-trend-reward')), length: /** @type {HTMLCanvasElement} */ ($('chart-trend-length')), split: /** @type {HTMLSelectElement} */ ($('trend-split')), range: /** @type {HTMLSelectElement} */ ($('trend-range')), apiBase, headers: apiHeaders });
for (const s of STATES) ui.filterState.append(new Option(s, s));
for (const o of OUTCOMES) ui.filterOutcome.append(new Option(o, o));

// ---------------------------------------------------------------------------------------------
// Clock: elapsed times use the runtime's clock (event ts), not the browser's.

let clockOffset = 0;
let heartbeatSeen = false;
let offsetKnown = false;
/**
 * @param {unknown} ts
 * @param {boolean} authoritative
 */
function observeTs(ts, authoritative) {
  if (typeof ts !== 'number') return;
  const off = ts - Date.now();
  if (authoritative) {
    heartbeatSeen = true;
    clockOffset = off;
  } else if (!heartbeatSeen) {
    // Replayed events are older than now: the latest one is the best estimate of now.
    clockOffset = offsetKnown ? Math.max(clockOffset, off) : off;
  }
  offsetKnown = true;
}
const runtimeNow = () => Date.now() + clockOffset;

// ---------------------------------------------------------------------------------------------
// WebSocket: subscribe to everything; on reconnect resume after the last seq seen.

/** @type {WebSocket|null} */
let ws = null;
let backoffMs = 500;
let subN = 0;
/** What the server says the page shows (/visualizer/info.json): live, or a replay of a finished run. */
/** @type {{ mode: 'live'|'replay', run: { name?: string, rollouts?: number, events?: number } | null }} */
let info = { mode: 'live', run: null };
/** @param {string} state */
function setConn(state) {
  ui.conn.dataset.state = state;
  ui.conn.dataset.mode = info.mode;
  const replay = info.mode === 'replay';
  ui.conn.className = `conn conn-${state}${replay ? ' conn-replay' : ''}`;
  // A finished run's replay (`rollout view DIR`) is not live: say so, and which run it is.
  const label = replay ? `replay${info.run?.name ? ` · ${info.run.name}` : ''}` : 'live';
  ui.conn.textContent = state === 'open' ? label : state;
  ui.conn.title = replay ? `a finished run, read-only${info.run ? ` (${info.run.rollouts} rollouts, ${info.run.events} events)` : ''}` : state === 'open' ? 'live: events stream in as they happen' : '';
}

async function loadInfo() {
  try {
    const res = await fetch('/visualizer/info.json');
    if (!res.ok) return;
    const body = await res.json();
    info = { mode: body.mode === 'replay' ? 'replay' : 'live', run: body.run ?? null };
    // Merge data-source aliases as `rollout run`'s summary does (the server's own table).
    store.rewards.setFamilies(body.dataSourceFamilies ?? {});
    store.chartVersion++;
    setConn(ui.conn.dataset.state ?? 'connecting');
    schedule();
  } catch {
    // An older server without info.json: a live page without alias merging.
  }
}
/** @param {WebSocket} socket */
function subscribe(socket) {
  subN += 1;
  socket.send(JSON.stringify({ type: 'subscribe', sub: `viz-${subN}`, after: store.lastSeq }));
}
function connect() {
  setConn('connecting');
  const socket = new WebSocket(wsUrl);
  ws = socket;
  socket.onopen = () => {
    backoffMs = 500;
    fills.clear();
    stats.connects += 1;
    setConn('open');
    subscribe(socket);
  };
  socket.onmessage = (m) => {
    let data;
    try {
      data = JSON.parse(m.data);
    } catch {
      return;
    }
    for (const msg of Array.isArray(data) ? data : [data]) handle(msg, socket);
    schedule();
  };
  socket.onclose = () => {
    if (ws !== socket) return;
    setConn('closed');
    setTimeout(connect, backoffMs);
    backoffMs = Math.min(backoffMs * 2, 5000);
  };
}
/**
 * Open gap replays: subscription name -> the last seq it must deliver.
 * @type {Map<string|undefined, number>}
 */
const fills = new Map();
let fillN = 0;

/**
 * The server skipped events because this page read too slowly; they are still retained, so ask
 * for exactly them on a second subscription and fold them in out of order (Store#expect).
 * @param {WebSocket} socket
 * @param {number} from
 * @param {number} to
 */
function fillGap(socket, from, to) {
  if (socket.readyState !== WebSocket.OPEN) return;
  store.expect(from, to);
  fillN += 1;
  const sub = `fill-${fillN}`;
  fills.set(sub, to);
  socket.send(JSON.stringify({ type: 'subscribe', sub, after: from - 1 }));
}

/**
 * @param {WebSocket} socket
 * @param {string|undefined} sub
 */
function endFill(socket, sub) {
  fills.delete(sub);
  if (socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: 'unsubscribe', sub }));
}

/**
 * @param {ServerMessage | null} msg
 * @param {WebSocket} socket
 */
function handle(msg, socket) {
  stats.messages += 1;
  if (msg === null || typeof msg !== 'object') return;
  if (msg.type === 'hello' && store.epoch !== null && msg.epoch !== store.epoch) {
    ui.notice.hidden = true;
    // The runtime restarted: its seq numbers start over, so our cursor means nothing.
    store.reset();
    store.epoch = msg.epoch;
    if (typeof msg.seq === 'number') store.serverSeq = msg.seq;
    selectedVersion = -1;
    if (socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify({ type: 'unsubscribe', sub: `viz-${subN}` }));
      subscribe(socket);
    }
    return;
  }
  if (msg.type === 'error') {
    // e.g. STOPPED: the service has no runtime until POST /start; its next hello resubscribes us.
    ui.notice.hidden = false;
    ui.notice.textContent = `server: ${msg.error?.message ?? 'error'}`;
    return;
  }
  if (msg.type === 'subscribed') ui.notice.hidden = true;
  if (msg.type === 'gap' && msg.sub === `viz-${subN}` && msg.reason === 'slow-client' && /** @type {number} */ (msg.to) >= 1) fillGap(socket, /** @type {number} */ (msg.from), /** @type {number} */ (msg.to));
  if (msg.type === 'event' && fills.has(msg.sub) && (msg.event?.seq ?? 0) >= /** @type {number} */ (fills.get(msg.sub))) endFill(socket, msg.sub);
  if (msg.type === 'gap' && fills.has(msg.sub)) endFill(socket, msg.sub);
  if (msg.type === 'heartbeat' || msg.type === 'backends') observeTs(msg.ts, true);
  else if (msg.type === 'event') observeTs(msg.event?.ts, false);
  else if (typeof msg.rolloutId === 'string') observeTs(msg.ts, false);
  const r = store.apply(msg);
  if (r !== null && r.id === selectedId && r.endTs !== null && !results.has(r.id)) fetchResult(r.id);
}

// ---------------------------------------------------------------------------------------------
// Render loop.

let rafPending = false;
let seenVersion = -1;
let filtersChanged = true;
/** @type {RolloutRecord[]} */
let filtered = [];
let lastChartDraw = 0;
let chartTimer = false;
let seenChartVersion = -1;
let tick = 0;
let seenTick = -1;
/** @type {TableRow[]} */
const pool = [];

function schedule() {
  if (rafPending) return;
  rafPending = true;
  requestAnimationFrame(frame);
}

function frame() {
  rafPending = false;
  const t0 = performance.now();
  const ticked = tick !== seenTick;
  seenTick = tick;
  let rowsDirty = ticked;
  // Sorting by elapsed depends on the clock, so it is redone on each tick too.
  if (store.version !== seenVersion || filtersChanged || (ticked && sortKey === 'elapsed')) {
    filtered = store.filter({ state: ui.filterState.value, outcome: ui.filterOutcome.value, task: ui.filterTask.value, flagged: ui.filterFlagged.checked });
    if (sortKey !== null) Store.sort(filtered, sortKey, sortDir, runtimeNow());
    seenVersion = store.version;
    filtersChanged = false;
    rowsDirty = true;
    renderCounts();
  }
  if (linkPending !== null && rowsDirty) scrollToLinked();
  if (rowsDirty || scrolled) renderRows(ticked);
  if (ticked || rowsDirty) renderStuck();
  scrolled = false;
  const now = performance.now();
  if ((store.chartVersion !== seenChartVersion || ticked) && now - lastChartDraw >= CHART_INTERVAL_MS) {
    renderCharts();
    seenChartVersion = store.chartVersion;
    lastChartDraw = now;
  } else if (store.chartVersion !== seenChartVersion && !chartTimer) {
    // Charts are throttled: come back for them once the interval has passed (one timer at most).
    chartTimer = true;
    setTimeout(() => {
      chartTimer = false;
      schedule();
    }, CHART_INTERVAL_MS - (now - lastChartDraw));
  }
  renderDetail(ticked);
  const ms = performance.now() - t0;
  stats.frames += 1;
  stats.frameMsTotal += ms;
  stats.frameMsMax = Math.max(stats.frameMsMax, ms);
  stats.recentFrameMs.push(ms);
  if (stats.recentFrameMs.length > 600) stats.recentFrameMs.shift();
}

function renderCounts() {
  // One source for every count on the screen: a rollout has ended when it has an outcome
  // (Store#endedCount is the sum of the outcome counts the outcome chart draws).
  const ended = store.endedCount;
  const live = store.rollouts.size - ended;
  const now = store.latestTs;
  let recent = 0;
  for (let k = Math.floor(now / store.bucketMs) - 9; k <= Math.floor(now / store.bucketMs); k++) {
    const b = store.buckets.get(k);
    if (b) for (const n of Object.values(b.outcomes)) recent += n;
  }
  ui.counts.textContent = `${live} live · ${ended} ended · ${(recent / 10).toFixed(1)} ended/s${store.flaggedCount > 0 ? ` · ${store.flaggedCount} flagged` : ''}`;
  ui.counts.dataset.live = String(live);
  ui.counts.dataset.ended = String(ended);
  ui.counts.dataset.flagged = String(store.flaggedCount);
  renderWindow();
  ui.rowCount.textContent = `${filtered.length} of ${store.rollouts.size} rollouts`;
  // A first-run hint on an empty page: how to get work onto it.
  ui.firstRun.hidden = store.rollouts.size > 0;
  ui.rowCount.dataset.shown = String(filtered.length);
  ui.rowCount.dataset.total = String(store.rollouts.size);
  // Amber only for events this page lost; the server's retention window is said by renderWindow.
  ui.gaps.hidden = store.gaps === 0;
  ui.gaps.dataset.count = String(store.gaps);
  if (store.gaps > 0) ui.gaps.textContent = `${store.gaps} gap(s): ${store.lostEvents} events were not delivered (reconnected past the server's retention)`;
}

/** How much of the run the page covers: rollouts and events shown out of how many, since when. */
function renderWindow() {
  const shown = store.rollouts.size;
  const total = Math.max(shown + store.evicted, store.serverTotal ?? 0);
  const eventsTotal = Math.max(store.serverSeq, store.lastSeq);
  const from = store.firstSeq ?? store.windowFrom;
  const w = ui.window;
  w.dataset.rollouts = String(shown);
  w.dataset.rolloutsTotal = String(total);
  w.dataset.events = String(store.eventsApplied);
  w.dataset.eventsTotal = String(eventsTotal);
  w.dataset.eventsFrom = String(from);
  w.dataset.since = store.firstTs === null ? '' : String(store.firstTs);
  if (shown === 0 && eventsTotal === 0) {
    w.textContent = '';
    return;
  }
  /** @param {number} x */
  const n = (x) => x.toLocaleString('en-US');
  const parts = [`${shown === total ? `all ${n(total)}` : `${n(shown)} of ${n(total)}`} rollouts`];
  if (store.evicted > 0) parts[0] += ` (the ${n(store.evicted)} oldest ended ones dropped by this page)`;
  if (eventsTotal > 0) {
    const past = store.windowFrom > 1 ? ` (#1–#${n(store.windowFrom - 1)} are past the server's event retention)` : '';
    parts.push(`events ${store.eventsApplied === eventsTotal ? `all ${n(eventsTotal)}` : `${n(store.eventsApplied)} of ${n(eventsTotal)}`}${past}`);
  }
  if (store.firstTs !== null) parts.push(`since ${fmtClock(store.firstTs)}`);
  w.textContent = `showing ${parts.join(' · ')}`;
  w.classList.toggle('partial', shown < total || store.eventsApplied < eventsTotal);
}

/**
 * A runtime timestamp as a local clock time, with the date when it is not today.
 * @param {number} ts
 */
function fmtClock(ts) {
  const d = new Date(ts);
  const time = d.toLocaleTimeString([], { hour12: false });
  return d.toDateString() === new Date().toDateString() ? time : `${d.toLocaleDateString()} ${time}`;
}

function renderStuck() {
  const now = runtimeNow();
  let n = 0;
  for (const r of store.rollouts.values()) if (r.endTs === null && now - r.stateTs > STUCK_MS) n++;
  ui.stuck.hidden = n === 0;
  ui.stuck.textContent = `${n} stuck > ${Math.round(STUCK_MS / 1000)} s in one state`;
  ui.stuck.dataset.count = String(n);
}

/** @type {string|null} */
let sortKey = null;
/** @type {1|-1} */
let sortDir = 1;
for (const head of document.querySelectorAll('.grid-head [data-sort]')) {
  head.addEventListener('click', () => {
    const key = /** @type {string} */ (/** @type {HTMLElement} */ (head).dataset.sort);
    // Click: ascending, again: descending, a third time: back to arrival order.
    if (sortKey !== key) [sortKey, sortDir] = [key, 1];
    else if (sortDir === 1) sortDir = -1;
    else sortKey = null;
    for (const h of document.querySelectorAll('.grid-head [data-sort]')) h.removeAttribute('data-dir');
    if (sortKey !== null) /** @type {HTMLElement} */ (head).dataset.dir = sortDir === 1 ? 'asc' : 'desc';
    filtersChanged = true;
    schedule();
  });
}

function makeRow() {
  const row = document.createElement('div');
  row.className = 'row';
  for (let i = 0; i < 8; i++) {
    const cell = document.createElement('span');
    if (i === 3 || i === 4 || i === 5 || i === 7) cell.className = 'num';
    row.append(cell);
  }
  ui.rows.append(row);
  return row;
}

let scrolled = false;
ui.rows.addEventListener('scroll', () => {
  scrolled = true;
  schedule();
});

/** @param {boolean} ticked */
function renderRows(ticked) {
  ui.spacer.style.height = `${filtered.length * ROW_H}px`;
  const top = ui.rows.scrollTop;
  const height = ui.rows.clientHeight || 400;
  const first = Math.max(0, Math.floor(top / ROW_H) - OVERSCAN);
  const last = Math.min(filtered.length, Math.ceil((top + height) / ROW_H) + OVERSCAN);
  const count = last - first;
  while (pool.length < count) pool.push(makeRow());
  const now = runtimeNow();
  for (let j = 0; j < pool.length; j++) {
    const row = pool[j];
    const r = j < count ? filtered[first + j] : undefined;
    if (r === undefined) {
      if (row.style.display !== 'none') row.style.display = 'none';
      row._key = null;
      continue;
    }
    if (row.style.display === 'none') row.style.display = '';
    const elapsed = (r.endTs ?? now) - r.submittedTs;
    const stuck = r.endTs === null && now - r.stateTs > STUCK_MS;
    // Only rewrite a row when something it shows changed: its rollout, position or elapsed.
    const key = `${r.id}|${r.version}|${first + j}|${r.endTs === null ? Math.floor(elapsed / 100) : 'end'}|${r.id === selectedId}|${stuck}|${r.elapsedKnown}`;
    if (row._key === key) continue;
    row._key = key;
    row.classList.toggle('stuck', stuck);
    row.style.transform = `translateY(${(first + j) * ROW_H}px)`;
    row.dataset.id = r.id;
    row.classList.toggle('selected', r.id === selectedId);
    const c = /** @type {HTMLCollectionOf<HTMLElement>} */ (row.children);
    c[0].textContent = r.id;
    c[0].title = r.id;
    c[1].textContent = Store.taskOf(r);
    c[2].textContent = r.state;
    c[2].className = `state-${r.state}`;
    c[2].title = r.endTs === null ? `${r.state} for ${fmtElapsed(now - r.stateTs)}` : r.state;
    c[3].textContent = String(r.turn);
    c[4].textContent = String(r.tokens);
    // From the first submission to the end, across retries; unknown (seeded without a wall time) is –.
    c[5].textContent = r.elapsedKnown ? fmtElapsed(elapsed) : '–';
    c[5].title = r.elapsedKnown ? (r.retries > 0 ? `${fmtElapsed(elapsed)} over ${r.retries + 1} attempts` : '') : 'elapsed time unknown: the rollout is known only from the server listing';
    c[6].textContent = r.outcome ?? '';
    c[6].className = r.outcome ? `outcome-${r.outcome}` : '';
    c[6].title = '';
    if (r.violations !== null) {
      // Integrity violations (#27): a badge with the count, the kinds in its tooltip.
      const flag = document.createElement('span');
      flag.className = 'flag';
      flag.textContent = `⚑${violationTotal(r.violations)}`;
      flag.title = `integrity violations: ${fmtViolations(r.violations)}`;
      c[6].title = flag.title;
      // First, so a narrow column clips the outcome's text rather than the flag.
      c[6].prepend(flag, ' ');
    }
    c[7].textContent = fmtReward(r.reward);
  }
  stats.renderedRows = count;
  void ticked;
}

function renderCharts() {
  const now = Math.max(store.latestTs, offsetKnown ? runtimeNow() : 0);
  drawThroughput($canvas('chart-throughput'), store.buckets, store.bucketMs, now, 60);
  drawBackends($canvas('chart-backends'), store.backendHistory, store.backends);
  drawSplitBar($canvas('chart-states'), store.stateCounts, STATE_COLORS, 'rollouts by state');
  const outcomeSplit = outcomeCountsByReward(store.outcomeCounts, store.rewards.completedZero);
  drawSplitBar($canvas('chart-outcomes'), outcomeSplit, REWARD_OUTCOME_COLORS, 'outcomes');
  $('chart-outcomes').dataset.counts = JSON.stringify(outcomeSplit);
  $('chart-states').dataset.counts = JSON.stringify(store.stateCounts);
  const hist = store.rewards.histogram();
  drawRewardHistogram($canvas('chart-rewards'), hist);
  $('chart-rewards').dataset.sources = JSON.stringify(hist.sources.map((x) => ({ name: x.name, n: x.n, mean: x.mean, counts: x.counts })));
  drawRewardOverTime($canvas('chart-reward-time'), store.rewards.overTime());
  renderGroupsSummary();
  trends.draw(store.rollouts, now);
  groupsTable.update(store.rewards.groups, store.rewards.version);
}

function renderGroupsSummary() {
  const g = store.rewards.groupSummary();
  const root = $('groups-summary');
  root.dataset.groups = String(g.groups);
  root.dataset.noSignal = String(g.noSignal);
  if (g.groups === 0) {
    root.textContent = 'GRPO groups: none yet (submit with n > 1 or a group id)';
    return;
  }
  root.replaceChildren();
  const b = document.createElement('b');
  b.textContent = `${g.groups} groups`;
  const line = document.createElement('div');
  line.append(b, ` · ${g.complete} complete`);
  const ns = document.createElement('div');
  ns.className = g.noSignal > 0 ? 'no-signal' : '';
  ns.textContent = `${g.noSignal} with no signal (all rewards equal)${g.complete > 0 ? ` — ${Math.round((100 * g.noSignal) / g.complete)}% of complete groups` : ''}`;
  const hint = document.createElement('div');
  hint.textContent = 'filter by a group id in "task" to see its members';
  root.append(line, ns, hint);
}

// ---------------------------------------------------------------------------------------------
// Filters and selection.

for (const input of [ui.filterState, ui.filterOutcome, ui.filterTask, ui.filterFlagged]) {
  input.addEventListener('input', () => {
    filtersChanged = true;
    ui.rows.scrollTop = 0;
    schedule();
  });
}

/** @type {string|null} */
let selectedId = null;
/**
 * A rollout named by the URL (#rollout=…) whose row has not been scrolled into view yet.
 * @type {string|null}
 */
let linkPending = null;

/** Scrolls the table so the linked rollout's row is in the middle of the view, once it exists. */
function scrollToLinked() {
  const i = filtered.findIndex((r) => r.id === linkPending);
  if (i < 0) return;
  const height = ui.rows.clientHeight || 400;
  // The spacer gives the list its height; without it the scroll would be clamped to 0.
  ui.spacer.style.height = `${filtered.length * ROW_H}px`;
  ui.rows.scrollTop = Math.max(0, i * ROW_H - height / 2 + ROW_H / 2);
  linkPending = null;
  scrolled = true;
}
let selectedVersion = -1;
/** @type {import('./graph.js').Graph | null} */
let graphData = null;
/** @type {ReturnType<typeof renderGraph> | null} */
let graphHandle = null;
/**
 * Fetched results by rollout id: null while the fetch runs.
 * @type {Map<string, ResultBody | null>}
 */
const results = new Map();
const terminal = new TerminalReplay($('terminal'));

ui.rows.addEventListener('click', (e) => {
  const row = /** @type {HTMLElement | null} */ (/** @type {HTMLElement} */ (e.target).closest('.row'));
  if (row && row.dataset.id) select(row.dataset.id);
});
$('detail-close').addEventListener('click', () => select(null));

/**
 * @param {string|null} id
 * @param {boolean} [fromLink]
 */
function select(id, fromLink = false) {
  const changed = id !== selectedId;
  if (fromLink) linkPending = id;
  selectedId = id;
  selectedVersion = -1;
  ui.detail.hidden = id === null;
  if (changed) terminal.setSteps([], false);
  if (id !== null) {
    history.replaceState(null, '', `#rollout=${encodeURIComponent(id)}`);
    const r = store.rollouts.get(id);
    if (r && r.endTs !== null && !results.has(id)) fetchResult(id);
  } else history.replaceState(null, '', location.pathname + location.search);
  seenVersion = -1;
  schedule();
}

/** @param {string} id */
async function fetchResult(id) {
  results.set(id, null);
  try {
    const res = await fetch(`${apiBase}/v1/rollouts/${encodeURIComponent(id)}`, { headers: apiHeaders });
    if (!res.ok) throw new Error(String(res.status));
    results.set(id, await res.json());
  } catch {
    // Not fatal: the conversation falls back to what the events carried.
    results.set(id, { unavailable: true });
  }
  if (id === selectedId) {
    selectedVersion = -1;
    schedule();
  }
}

/**
 * Rollouts whose events the server no longer retains still appear in its listing: seed the
 * table from it once, so a page opened late still shows every rollout the runtime knows.
 */
async function seedFromListing() {
  try {
    const res = await fetch(`${apiBase}/v1/rollouts?limit=100000`, { headers: apiHeaders });
    if (!res.ok) return;
    const body = await res.json();
    for (const s of body.rollouts ?? []) store.seed(s);
    if (typeof body.total === 'number') store.serverTotal = body.total;
    store.version++;
    schedule();
  } catch {
    // The listing is an optional extra; the event stream is the source of truth.
  }
}

/**
 * @param {ResultBody | null | undefined} body
 * @returns {ChatMessage[] | null}
 */
function messagesOf(body) {
  if (body === null || typeof body !== 'object') return null;
  for (const candidate of [body.trajectory?.messages, body.result?.trajectory?.messages, body.messages, body.result?.messages]) {
    if (Array.isArray(candidate)) return candidate;
  }
  return null;
}

async function loadGraph() {
  try {
    const res = await fetch('/visualizer/graph.json');
    if (!res.ok) throw new Error(`graph.json: ${res.status}`);
    graphData = await res.json();
    document.body.dataset.graph = 'ready';
  } catch (err) {
    document.body.dataset.graph = 'unavailable';
    $('graph').replaceChildren();
    console.warn(err);
  }
  selectedVersion = -1;
  schedule();
}

/** @param {boolean} ticked */
function renderDetail(ticked) {
  if (selectedId === null) return;
  const r = store.rollouts.get(selectedId);
  if (r === undefined) return;
  const live = r.endTs === null;
  const versionChanged = r.version !== selectedVersion;
  // The group panel follows its other members whether or not the selected rollout changes: it
  // ends before the others, and they go on ending (#30: it froze on a stale "no signal").
  if (versionChanged || store.rewards.version !== seenGroupVersion) {
    seenGroupVersion = store.rewards.version;
    renderGroup($('group'), r.groupId ? store.rewards.group(r.groupId) : null, r.id, (id) => select(id, true));
    renderTree($('tree'), store.rollouts, r, (id) => select(id, true));
  }
  if (!versionChanged && !(ticked && live)) return;
  selectedVersion = r.version;

  $('detail-title').textContent = r.id;
  $('detail').dataset.rollout = r.id;
  $('detail').dataset.state = r.state;
  const parts = [
    `task ${Store.taskOf(r) || '?'}`,
    `state ${r.state}`,
    `turn ${r.turn}`,
    `${r.tokens} tokens`,
    `attempt ${r.attempt}`,
    r.groupId ? `group ${r.groupId}` : '',
    r.outcome ? `outcome ${r.outcome}` : '',
    r.reward !== null ? `reward ${r.reward}` : '',
    r.finish ? `finish ${r.finish}` : '',
    r.error ? `error ${r.error.name ?? ''}: ${r.error.message ?? ''}` : '',
    r.droppedEvents > 0 ? `${r.droppedEvents} early events not kept` : '',
    r.violations !== null ? `⚑ integrity: ${fmtViolations(r.violations)}` : '',
  ];
  $('detail-summary').textContent = parts.filter(Boolean).join(' · ');

  if (graphData !== null) {
    if (graphHandle === null) graphHandle = renderGraph(/** @type {SVGSVGElement} */ (/** @type {Element} */ ($('graph'))), graphData);
    /** @type {string[]} */
    const visited = [];
    /** @type {Array<[string, string]>} */
    const taken = [];
    for (const ev of r.events) {
      if (ev.type !== 'rollout.state') continue;
      // A state event names its state (the runtime's schema).
      const state = /** @type {string} */ (ev.state);
      visited.push(state);
      if (ev.prev) taken.push([ev.prev, state]);
    }
    graphHandle.highlight(r.state, visited, taken);
  }
  renderTimeline($('timeline'), r.events, live ? runtimeNow() : /** @type {number} */ (r.endTs));
  if (versionChanged) {
    terminal.setSteps(bashSteps(r.events), true);
    renderConversation(r);
    const res = resultOf(results.get(r.id));
    renderEval($('eval'), res);
    renderTokenView($('tokens'), res, r.id, { apiBase, headers: apiHeaders });
  }
}

let seenGroupVersion = -1;

/**
 * The RolloutResult inside a `GET /v1/rollouts/:id` answer (or the answer itself).
 * @param {ResultBody | null | undefined} body
 * @returns {ResultJson | null}
 */
function resultOf(body) {
  if (body === null || body === undefined || typeof body !== 'object' || body.unavailable) return null;
  return body.result ?? (body.trajectory ? body : null);
}

/**
 * @param {string} id
 * @returns {Promise<ResultBody>}
 */
async function fetchResultBody(id) {
  const res = await fetch(`${apiBase}/v1/rollouts/${encodeURIComponent(id)}`, { headers: apiHeaders });
  if (!res.ok) throw new Error(`GET /v1/rollouts/${id}: ${res.status}`);
  return res.json();
}

$('download-one').addEventListener('click', async () => {
  if (selectedId === null) return;
  const id = selectedId;
  let body = results.get(id);
  if (!resultOf(body)) body = await fetchResultBody(id).catch(() => null);
  const res = resultOf(body);
  if (res === null) {
    ui.notice.hidden = false;
    ui.notice.textContent = `no result for ${id} yet`;
    return;
  }
  download(`${id}.json`, JSON.stringify(res, null, 2));
});

/**
 * Downloads the full result of every ended rollout the filters show, one JSON per line, fetched
 * six at a time (results already loaded are reused).
 */
$('download-filtered').addEventListener('click', async () => {
  const button = /** @type {HTMLButtonElement} */ ($('download-filtered'));
  const ids = filtered.filter((r) => r.endTs !== null).map((r) => r.id);
  const out = new Array(ids.length).fill(null);
  let next = 0;
  let done = 0;
  button.disabled = true;
  const worker = async () => {
    while (next < ids.length) {
      const i = next++;
      let body = results.get(ids[i]);
      if (!resultOf(body)) body = await fetchResultBody(ids[i]).catch(() => null);
      out[i] = resultOf(body);
      done++;
      button.textContent = `fetching ${done}/${ids.length}`;
    }
  };
  await Promise.all(Array.from({ length: Math.min(6, ids.length) }, worker));
  button.disabled = false;
  button.textContent = 'download JSONL';
  const rows = out.filter((x) => x !== null);
  download(`rollouts-${rows.length}.jsonl`, toJsonl(rows), 'application/x-ndjson');
});

/** @param {RolloutRecord} r */
function renderConversation(r) {
  const root = $('conversation');
  const full = messagesOf(results.get(r.id));
  /** @type {Array<{ role: string, name?: string, content?: string|null, toolCalls: ToolCall[] }>} */
  const msgs = [];
  if (full !== null) {
    for (const m of full) msgs.push({ role: m.role, name: m.name, content: m.content, toolCalls: m.tool_calls ?? [] });
    $('conv-source').textContent = '(full trajectory)';
  } else {
    for (const ev of r.events) {
      if (ev.type === 'llm.end') msgs.push({ role: 'assistant', name: `turn ${ev.turn}`, content: ev.content, toolCalls: ev.toolCalls ?? [] });
      else if (ev.type === 'tool.result') msgs.push({ role: 'tool', name: `${ev.name}${ev.exitCode !== null ? ` · exit ${ev.exitCode}` : ''}`, content: ev.output, toolCalls: [] });
    }
    $('conv-source').textContent = r.endTs === null ? '(live, from events)' : '(from events)';
  }
  const shown = msgs.slice(-200);
  const frag = document.createDocumentFragment();
  for (const m of shown) {
    const div = document.createElement('div');
    div.className = `msg msg-${m.role}`;
    const role = document.createElement('div');
    role.className = 'role';
    role.textContent = m.name ? `${m.role} · ${m.name}` : m.role;
    div.append(role);
    if (m.content) {
      const pre = document.createElement('pre');
      pre.textContent = m.content.length > 8000 ? `${m.content.slice(0, 8000)}\n… (${m.content.length - 8000} more chars)` : m.content;
      div.append(pre);
    }
    for (const call of m.toolCalls) {
      const c = document.createElement('pre');
      c.className = 'call';
      c.textContent = `→ ${call.name}(${JSON.stringify(call.arguments)})`;
      div.append(c);
    }
    frag.append(div);
  }
  root.replaceChildren(frag);
}

// Elapsed times and open timeline spans move with the clock even when no event arrives.
setInterval(() => {
  tick += 1;
  schedule();
}, 1000);

/** @type {Window & { __viz?: unknown }} */ (window).__viz = { store, stats, wsUrl, select, get selectedId() { return selectedId; } };

function selectFromHash() {
  const m = /^#rollout=(.+)$/.exec(location.hash);
  if (m && decodeURIComponent(m[1]) !== selectedId) select(decodeURIComponent(m[1]), true);
}
window.addEventListener('hashchange', selectFromHash);
selectFromHash();
loadInfo();
loadGraph();
connect();
seedFromListing();
