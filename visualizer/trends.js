// @ts-check
// Reward and response length over time, one line per data source or per weight version, over a
// chosen time range: the trend charts an RL engineer reads a run by. The per-rollout figures come
// from the page's store (end time, reward, data source; sampled tokens from its `llm.end`
// events) and from the listing (`GET /v1/rollouts`: `response_tokens`, `weight_version`), which
// is re-read at most every 10 s while ended rollouts lack what is shown (weight versions when
// split by them; the length of a rollout known without its events).

import { drawSeries } from './charts.js';

/**
 * @typedef {{ t: number, reward: number|null, length: number|null, source: string, version: string|null }} TrendPoint
 * @typedef {{ name: string, n: number, points: { t: number, mean: number, n: number }[] }} Series
 * @typedef {'source'|'version'} Split
 * @typedef {'reward'|'length'} Metric
 * @typedef {{ id: string, endTs: number|null, outcome: string|null, reward: number|null, dataSource: string, version: number, droppedEvents: number, events: Array<{ type: string, outputTokens?: number }> }} RolloutLike
 */

/** The time ranges offered, in ms; 0 is the whole run. @type {Array<[string, number]>} */
export const RANGES = [
  ['last 5 min', 5 * 60_000],
  ['last 15 min', 15 * 60_000],
  ['last hour', 60 * 60_000],
  ['last 6 hours', 6 * 60 * 60_000],
  ['whole run', 0],
];
/** Time buckets per chart: each point is the mean of the rollouts that ended in one. */
export const TREND_BUCKETS = 40;
const LISTING_EVERY_MS = 10_000;

/**
 * Groups points into `buckets` equal time buckets over [t0, t1], one series per data source or
 * weight version (`unknown` when none is known), each point the mean of `metric` in a bucket
 * (empty buckets are left out). Series are sorted by name, weight versions numerically. Pure.
 * @param {TrendPoint[]} points
 * @param {{ metric: Metric, split: Split, t0: number, t1: number, buckets?: number }} opts
 * @returns {Series[]}
 */
export function trendSeries(points, opts) {
  const buckets = opts.buckets ?? TREND_BUCKETS;
  const width = Math.max(1, (opts.t1 - opts.t0) / buckets);
  /** @type {Map<string, { n: number, sums: Map<number, { sum: number, n: number }> }>} */
  const by = new Map();
  for (const p of points) {
    const v = p[opts.metric];
    if (v === null || !Number.isFinite(v) || p.t < opts.t0 || p.t > opts.t1) continue;
    const name = opts.split === 'source' ? p.source || '(none)' : p.version === null ? 'unknown' : `v${p.version}`;
    let s = by.get(name);
    if (s === undefined) {
      s = { n: 0, sums: new Map() };
      by.set(name, s);
    }
    const k = Math.min(buckets - 1, Math.floor((p.t - opts.t0) / width));
    const b = s.sums.get(k) ?? { sum: 0, n: 0 };
    b.sum += v;
    b.n++;
    s.sums.set(k, b);
    s.n++;
  }
  const out = [];
  for (const [name, s] of by) {
    const pts = [...s.sums].sort((a, b) => a[0] - b[0]).map(([k, b]) => ({ t: opts.t0 + (k + 0.5) * width, mean: b.sum / b.n, n: b.n }));
    out.push({ name, n: s.n, points: pts });
  }
  // Weight versions in numeric order where both are numbers, `unknown` last; names otherwise.
  const num = (/** @type {string} */ name) => (opts.split === 'version' ? Number(name.slice(1)) : NaN);
  const last = (/** @type {string} */ name) => (opts.split === 'version' && name === 'unknown' ? 1 : 0);
  return out.sort((a, b) => last(a.name) - last(b.name) || (Number.isFinite(num(a.name)) && Number.isFinite(num(b.name)) ? num(a.name) - num(b.name) : a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/**
 * The trend charts: two canvases (reward, response length) and their controls (split by,
 * time range), all elements of index.html.
 * @param {{ reward: HTMLCanvasElement, length: HTMLCanvasElement, split: HTMLSelectElement, range: HTMLSelectElement, apiBase: string, headers: Record<string, string> }} ui
 */
export function createTrends(ui) {
  for (const [label, ms] of RANGES) ui.range.append(new Option(label, String(ms)));
  ui.range.value = '0';
  /** Per rollout id: figures the listing gave. @type {Map<string, { length: number|null, version: string|null }>} */
  const listed = new Map();
  /** Per rollout id: sampled tokens summed from its events, at a rollout version. @type {Map<string, { version: number, length: number|null }>} */
  const fromEvents = new Map();
  let listingAt = -Infinity;
  let listingBusy = false;
  /** @type {{ values(): Iterable<RolloutLike> }} */
  let lastRollouts = new Map();
  let lastNow = 0;

  /** @param {RolloutLike} r */
  const eventLength = (r) => {
    const hit = fromEvents.get(r.id);
    if (hit !== undefined && hit.version === r.version) return hit.length;
    let n = 0;
    let calls = 0;
    for (const ev of r.events) {
      if (ev.type !== 'llm.end') continue;
      n += ev.outputTokens ?? 0;
      calls++;
    }
    // Without events (a rollout known from the listing) or with early ones dropped, the sum is not the length.
    const length = calls > 0 && r.droppedEvents === 0 ? n : null;
    fromEvents.set(r.id, { version: r.version, length });
    return length;
  };

  async function refreshListing() {
    listingBusy = true;
    try {
      const res = await fetch(`${ui.apiBase}/v1/rollouts?limit=100000`, { headers: ui.headers });
      if (!res.ok) return;
      const body = await res.json();
      for (const s of body.rollouts ?? []) {
        if (s === null || typeof s !== 'object' || typeof s.id !== 'string' || s.outcome === null) continue;
        listed.set(s.id, { length: typeof s.response_tokens === 'number' ? s.response_tokens : null, version: s.weight_version === null || s.weight_version === undefined ? null : String(s.weight_version) });
      }
      draw(lastRollouts, lastNow, true);
    } catch {
      // The listing only adds weight versions; the charts work without it.
    } finally {
      listingBusy = false;
    }
  }

  /**
   * @param {{ values(): Iterable<RolloutLike> }} rollouts the store's rollouts (a Map by id)
   * @param {number} now the runtime clock (the newest event time)
   * @param {boolean} [fromListing]
   */
  function draw(rollouts, now, fromListing = false) {
    lastRollouts = rollouts;
    lastNow = now;
    /** @type {TrendPoint[]} */
    const points = [];
    const split = /** @type {Split} */ (ui.split.value);
    let missing = false;
    let first = Infinity;
    for (const r of rollouts.values()) {
      if (r.endTs === null || r.outcome === null) continue;
      const l = listed.get(r.id);
      const own = eventLength(r);
      // The listing is re-read only for what the events lack: weight versions, or the length of
      // a rollout known without its LLM events.
      if (l === undefined && (split === 'version' || own === null)) missing = true;
      const length = own ?? l?.length ?? null;
      points.push({ t: r.endTs, reward: typeof r.reward === 'number' ? r.reward : null, length, source: r.dataSource, version: l?.version ?? null });
      if (r.endTs < first) first = r.endTs;
    }
    if (missing && !fromListing && !listingBusy && performance.now() - listingAt >= LISTING_EVERY_MS) {
      listingAt = performance.now();
      void refreshListing();
    }
    const span = Number(ui.range.value);
    // The range ends at the newest end time: live, that is about now; for a finished run
    // (`rollout view`), the page's clock is today while the run's rollouts ended long ago.
    const t1 = points.length > 0 ? points.reduce((m, p) => Math.max(m, p.t), -Infinity) : now;
    const t0 = span > 0 ? t1 - span : Number.isFinite(first) ? Math.min(first, t1 - 1000) : t1 - 60_000;
    const splitName = split === 'source' ? 'data source' : 'weight version';
    drawSeries(ui.reward, { title: `mean reward per ${splitName}`, yLabel: 'reward', xLabel: 'time (runtime clock)', t0, t1, series: trendSeries(points, { metric: 'reward', split, t0, t1 }) });
    drawSeries(ui.length, { title: `mean response length per ${splitName}`, yLabel: 'sampled tokens', xLabel: 'time (runtime clock)', t0, t1, series: trendSeries(points, { metric: 'length', split, t0, t1 }) });
  }

  for (const input of [ui.split, ui.range]) input.addEventListener('input', () => draw(lastRollouts, lastNow));
  return { draw };
}
