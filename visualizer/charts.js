// @ts-check
// Hand-written canvas charts: stacked bars of outcomes per second, a line of LLM calls per
// second, and per-backend load. Each draw clears and repaints; they run at most once a frame.

import { backendStateLabel } from './format.js';

/**
 * @typedef {{ t: number, outcomes: Record<string, number>, llm: number, tools: number }} Bucket
 * @typedef {{ id: string, state: string, inFlight: number, latencyMs: number|null }} BackendSnapshot
 * @typedef {{ text: string, color: string }} LegendItem
 */

export const OUTCOME_COLORS = {
  completed: '#3fb950',
  truncated: '#d29922',
  'timed-out': '#db6d28',
  cancelled: '#8b949e',
  'infra-error': '#f85149',
  'task-error': '#bc8cff',
};
const PALETTE = ['#58a6ff', '#3fb950', '#d29922', '#f778ba', '#a371f7', '#39c5cf', '#db6d28', '#8b949e'];

/** Sizes the canvas to its box (device pixels) and clears it. @param {HTMLCanvasElement} canvas */
function prepare(canvas) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 300;
  const h = canvas.clientHeight || 120;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
  }
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext('2d'));
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  ctx.font = '10px ui-monospace, monospace';
  return { ctx, w, h };
}

/**
 * @param {CanvasRenderingContext2D} ctx
 * @param {number} w
 * @param {number} h
 * @param {number} max
 * @param {string} title
 */
function axes(ctx, w, h, max, title) {
  ctx.fillStyle = '#8b949e';
  ctx.fillText(title, 4, 10);
  ctx.textAlign = 'right';
  ctx.fillText(String(max), w - 2, 22);
  ctx.textAlign = 'left';
  ctx.strokeStyle = '#30363d';
  ctx.beginPath();
  ctx.moveTo(0, h - 12.5);
  ctx.lineTo(w, h - 12.5);
  ctx.stroke();
}

/**
 * Outcomes per second (stacked bars) and LLM calls per second (line), over the last `seconds`
 * buckets ending at `now`.
 * @param {HTMLCanvasElement} canvas
 * @param {Map<number, Bucket>} buckets
 * @param {number} bucketMs
 * @param {number} now
 */
export function drawThroughput(canvas, buckets, bucketMs, now, seconds = 60) {
  const { ctx, w, h } = prepare(canvas);
  const end = Math.floor(now / bucketMs);
  const rows = [];
  let max = 1;
  for (let k = end - seconds + 1; k <= end; k++) {
    const b = buckets.get(k);
    const total = b ? Object.values(b.outcomes).reduce((a, c) => a + c, 0) : 0;
    const llm = b ? b.llm : 0;
    max = Math.max(max, total, llm);
    rows.push({ b, total, llm });
  }
  const plotH = h - 26;
  const bw = w / seconds;
  rows.forEach(({ b }, i) => {
    if (!b) return;
    let y = h - 13;
    for (const [outcome, color] of Object.entries(OUTCOME_COLORS)) {
      const n = b.outcomes[outcome] ?? 0;
      if (n === 0) continue;
      const bh = (n / max) * plotH;
      ctx.fillStyle = color;
      ctx.fillRect(i * bw + 1, y - bh, Math.max(1, bw - 2), bh);
      y -= bh;
    }
  });
  ctx.strokeStyle = '#58a6ff';
  ctx.beginPath();
  rows.forEach(({ llm }, i) => {
    const x = i * bw + bw / 2;
    const y = h - 13 - (llm / max) * plotH;
    if (i === 0) ctx.moveTo(x, y);
    else ctx.lineTo(x, y);
  });
  ctx.stroke();
  axes(ctx, w, h, max, `rollouts ended / s (bars, by outcome) · LLM calls / s (line) · last ${seconds} s`);
}

/**
 * In-flight requests per backend over the recent snapshots (lines) and now (labels).
 * @param {HTMLCanvasElement} canvas
 * @param {Array<{ ts: number, load: Record<string, number> }>} history
 * @param {BackendSnapshot[]} backends
 */
export function drawBackends(canvas, history, backends) {
  const { ctx, w, h } = prepare(canvas);
  const ids = backends.map((b) => b.id);
  let max = 1;
  for (const snap of history) for (const id of ids) max = Math.max(max, snap.load[id] ?? 0);
  const plotH = h - 26;
  const n = Math.max(2, history.length);
  ids.forEach((id, j) => {
    ctx.strokeStyle = PALETTE[j % PALETTE.length];
    ctx.beginPath();
    history.forEach((snap, i) => {
      const x = (i / (n - 1)) * (w - 4) + 2;
      const y = h - 13 - ((snap.load[id] ?? 0) / max) * plotH;
      if (i === 0) ctx.moveTo(x, y);
      else ctx.lineTo(x, y);
    });
    ctx.stroke();
  });
  let x = 4;
  backends.forEach((b, j) => {
    ctx.fillStyle = PALETTE[j % PALETTE.length];
    const text = `${b.id} ${backendStateLabel(b.state)} ${b.inFlight} in flight${b.latencyMs !== null ? `, ${Math.round(b.latencyMs)} ms` : ''}`;
    ctx.fillText(text, x, h - 2);
    x += ctx.measureText(text).width + 12;
  });
  if (backends.length === 0) {
    ctx.fillStyle = '#8b949e';
    ctx.fillText('no backend snapshot yet', 4, h - 2);
  }
  axes(ctx, w, h, max, 'in-flight LLM requests per backend');
}

/**
 * Writes legend items left to right, wrapping onto a new line when one would overflow the
 * canvas, so a long legend never runs off its edge. Returns the y of the last line.
 * @param {CanvasRenderingContext2D} ctx
 * @param {LegendItem[]} items
 * @param {number} w
 * @param {number} y
 */
function legend(ctx, items, w, y, lineH = 12) {
  let x = 4;
  for (const { text, color } of items) {
    const tw = ctx.measureText(text).width;
    if (x > 4 && x + tw > w - 4) {
      x = 4;
      y += lineH;
    }
    ctx.fillStyle = color;
    ctx.fillRect(x, y - 7, 7, 7);
    ctx.fillStyle = '#c9d1d9';
    ctx.fillText(text, x + 10, y);
    x += tw + 22;
  }
  return y;
}

/**
 * One horizontal bar split by count: rollouts per state, or per outcome.
 * @param {HTMLCanvasElement} canvas
 * @param {Record<string, number>} counts
 * @param {Record<string, string>} colors
 * @param {string} title
 */
export function drawSplitBar(canvas, counts, colors, title) {
  const { ctx, w } = prepare(canvas);
  const entries = Object.entries(counts).filter(([, n]) => n > 0);
  const total = entries.reduce((a, [, n]) => a + n, 0);
  ctx.fillStyle = '#8b949e';
  ctx.fillText(`${title} (${total})`, 4, 10);
  let x = 0;
  /** @type {LegendItem[]} */
  const items = [];
  entries.forEach(([key, n], j) => {
    const bw = total === 0 ? 0 : (n / total) * w;
    const color = colors[key] ?? PALETTE[j % PALETTE.length];
    ctx.fillStyle = color;
    ctx.fillRect(x, 16, bw, 14);
    x += bw;
    items.push({ text: `${key} ${n}`, color });
  });
  legend(ctx, items, w, 44);
}

/** Outcome colours with `completed` split by reward, so "completed" never hides reward 0. */
export const REWARD_OUTCOME_COLORS = { ...OUTCOME_COLORS, 'completed · reward>0': '#3fb950', 'completed · reward 0': '#1f5f2b' };

/**
 * Outcome counts with completed rollouts split by reward: a green bar of 100 must not hide that
 * 20 of them scored 0. `completedZero` is {@link RewardStats#completedZero}.
 * @param {Record<string, number>} outcomeCounts
 * @param {number} completedZero
 */
export function outcomeCountsByReward(outcomeCounts, completedZero) {
  /** @type {Record<string, number>} */
  const out = {};
  for (const [k, n] of Object.entries(outcomeCounts)) {
    if (k === 'completed') {
      const zero = Math.min(n, completedZero);
      out['completed · reward>0'] = n - zero;
      out['completed · reward 0'] = zero;
    } else out[k] = n;
  }
  return out;
}

/**
 * The reward histogram: one group of bars per bin, one bar per data source, with each source's
 * mean and count in the legend. `hist` is {@link RewardStats#histogram}'s answer.
 * @param {HTMLCanvasElement} canvas
 * @param {{ lo: number, hi: number, bins: number, sources: Array<{ name: string, n: number, mean: number, counts: number[] }> }} hist
 */
export function drawRewardHistogram(canvas, hist) {
  const { ctx, w, h } = prepare(canvas);
  const { lo, hi, bins, sources } = hist;
  let max = 1;
  for (const s of sources) for (const c of s.counts) max = Math.max(max, c);
  const plotTop = 16;
  const plotBottom = h - 40;
  const plotH = plotBottom - plotTop;
  const groupW = (w - 8) / bins;
  const barW = Math.max(1, (groupW - 4) / Math.max(1, sources.length));
  sources.forEach((s, j) => {
    ctx.fillStyle = PALETTE[j % PALETTE.length];
    s.counts.forEach((c, i) => {
      if (c === 0) return;
      const bh = (c / max) * plotH;
      ctx.fillRect(4 + i * groupW + 2 + j * barW, plotBottom - bh, Math.max(1, barW - 1), bh);
    });
  });
  ctx.strokeStyle = '#30363d';
  ctx.beginPath();
  ctx.moveTo(0, plotBottom + 0.5);
  ctx.lineTo(w, plotBottom + 0.5);
  ctx.stroke();
  ctx.fillStyle = '#8b949e';
  ctx.fillText(`reward distribution by data source (${sources.reduce((a, s) => a + s.n, 0)} rewarded)`, 4, 10);
  ctx.textAlign = 'right';
  ctx.fillText(String(max), w - 2, 22);
  ctx.fillText(String(Math.round(hi * 100) / 100), w - 2, plotBottom + 11);
  ctx.textAlign = 'left';
  ctx.fillText(String(Math.round(lo * 100) / 100), 4, plotBottom + 11);
  if (sources.length === 0) {
    ctx.fillText('no rewards yet', 4, plotBottom - 4);
    return;
  }
  legend(ctx, sources.map((s, j) => ({ text: `${s.name}: mean ${s.mean.toFixed(3)} (n=${s.n})`, color: PALETTE[j % PALETTE.length] })), w, plotBottom + 24);
}

/**
 * Mean reward per time bucket (line), with the bucket's count under it (bars, faint).
 * @param {HTMLCanvasElement} canvas
 * @param {Array<{ t: number, mean: number, n: number }>} points
 */
export function drawRewardOverTime(canvas, points) {
  const { ctx, w, h } = prepare(canvas);
  const plotTop = 16;
  const plotBottom = h - 14;
  ctx.fillStyle = '#8b949e';
  ctx.fillText('mean reward over time', 4, 10);
  if (points.length === 0) {
    ctx.fillText('no rewards yet', 4, plotBottom - 4);
    return;
  }
  let lo = 0;
  let hi = 1;
  let maxN = 1;
  for (const p of points) {
    lo = Math.min(lo, p.mean);
    hi = Math.max(hi, p.mean);
    maxN = Math.max(maxN, p.n);
  }
  const n = points.length;
  const x = (/** @type {number} */ i) => (n === 1 ? w / 2 : 4 + (i / (n - 1)) * (w - 8));
  const y = (/** @type {number} */ v) => plotBottom - ((v - lo) / (hi - lo)) * (plotBottom - plotTop);
  ctx.fillStyle = '#21262d';
  points.forEach((p, i) => {
    const bh = (p.n / maxN) * (plotBottom - plotTop) * 0.5;
    ctx.fillRect(x(i) - 2, plotBottom - bh, 4, bh);
  });
  ctx.strokeStyle = '#3fb950';
  ctx.beginPath();
  points.forEach((p, i) => (i === 0 ? ctx.moveTo(x(i), y(p.mean)) : ctx.lineTo(x(i), y(p.mean))));
  ctx.stroke();
  ctx.fillStyle = '#8b949e';
  ctx.textAlign = 'right';
  ctx.fillText(`last ${points[n - 1].mean.toFixed(3)} (n=${points[n - 1].n})`, w - 2, 10);
  ctx.textAlign = 'left';
  ctx.fillText(String(lo), 4, plotBottom + 11);
}

/**
 * Round tick values inside [lo, hi]: about `count` of them at a step of 1, 2 or 5 × 10^k. Pure.
 * @param {number} lo
 * @param {number} hi
 * @param {number} [count]
 */
export function niceTicks(lo, hi, count = 5) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = ([1, 2, 5, 10].find((m) => m * mag >= raw) ?? 10) * mag;
  const out = [];
  for (let k = Math.ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k++) out.push(Number((k * step).toPrecision(12)));
  return out;
}

/** Time-axis steps, in ms: the smallest giving at most ~7 ticks is used. */
const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400].map((s) => s * 1000);

/**
 * Tick times for a time axis over [t0, t1] (epoch ms), at a round step, with labels `HH:MM:SS`
 * (`HH:MM` for steps of a minute or more), in the browser's time zone. Pure.
 * @param {number} t0
 * @param {number} t1
 * @param {number} [maxTicks]
 */
export function timeTicks(t0, t1, maxTicks = 7) {
  const step = TIME_STEPS.find((s) => (t1 - t0) / s <= maxTicks) ?? TIME_STEPS[TIME_STEPS.length - 1] ?? 86_400_000;
  const out = [];
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
    const d = new Date(t);
    const hh = String(d.getHours()).padStart(2, '0');
    const mm = String(d.getMinutes()).padStart(2, '0');
    const ss = String(d.getSeconds()).padStart(2, '0');
    out.push({ t, label: step >= 60_000 ? `${hh}:${mm}` : `${hh}:${mm}:${ss}` });
  }
  return out;
}

/**
 * A line chart over time with labelled axes: one line (with a dot per point) per series, a
 * legend with each series' count, round ticks on both axes, the y axis named `yLabel` and the x
 * axis `xLabel`. What it drew is also on the canvas's data attributes (`data-series`,
 * `data-x-label`, `data-y-label`, `data-x-ticks`, `data-y-ticks`, `data-range`), for tests and
 * for reading values off the page.
 * @param {HTMLCanvasElement} canvas
 * @param {{ title: string, yLabel: string, xLabel: string, t0: number, t1: number, series: Array<{ name: string, n: number, points: Array<{ t: number, mean: number, n: number }> }> }} chart
 */
export function drawSeries(canvas, chart) {
  const { ctx, w, h } = prepare(canvas);
  const { t0, t1, series } = chart;
  const left = 52;
  const right = 10;
  const top = 34;
  const bottom = 34;
  const plotW = Math.max(10, w - left - right);
  const plotH = Math.max(10, h - top - bottom);
  let lo = Infinity;
  let hi = -Infinity;
  for (const s of series) for (const p of s.points) {
    lo = Math.min(lo, p.mean);
    hi = Math.max(hi, p.mean);
  }
  if (!Number.isFinite(lo)) [lo, hi] = [0, 1];
  if (lo > 0 && lo < hi * 0.5) lo = 0;
  if (hi - lo < 1e-9) [lo, hi] = [lo - (Math.abs(lo) || 1) * 0.5, hi + (Math.abs(hi) || 1) * 0.5];
  const yTicks = niceTicks(lo, hi, 4);
  lo = Math.min(lo, yTicks[0] ?? lo);
  hi = Math.max(hi, yTicks[yTicks.length - 1] ?? hi);
  const span = Math.max(1, t1 - t0);
  const x = (/** @type {number} */ t) => left + ((t - t0) / span) * plotW;
  const y = (/** @type {number} */ v) => top + plotH - ((v - lo) / (hi - lo)) * plotH;

  ctx.fillStyle = '#c9d1d9';
  ctx.font = '12px ui-sans-serif, system-ui, sans-serif';
  ctx.fillText(chart.title, 6, 14);
  ctx.font = '11px ui-monospace, monospace';
  // Grid and y ticks.
  ctx.strokeStyle = '#21262d';
  ctx.fillStyle = '#8b949e';
  ctx.textAlign = 'right';
  for (const v of yTicks) {
    const yy = Math.round(y(v)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(left, yy);
    ctx.lineTo(left + plotW, yy);
    ctx.stroke();
    ctx.fillText(fmtTick(v), left - 5, yy + 4);
  }
  // x ticks.
  const xTicks = timeTicks(t0, t1);
  ctx.textAlign = 'center';
  for (const tk of xTicks) {
    const xx = Math.round(x(tk.t)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(xx, top + plotH);
    ctx.lineTo(xx, top + plotH + 4);
    ctx.strokeStyle = '#8b949e';
    ctx.stroke();
    ctx.fillText(tk.label, Math.min(Math.max(xx, left + 20), w - 24), top + plotH + 15);
  }
  // Axes.
  ctx.strokeStyle = '#8b949e';
  ctx.beginPath();
  ctx.moveTo(left + 0.5, top);
  ctx.lineTo(left + 0.5, top + plotH + 0.5);
  ctx.lineTo(left + plotW, top + plotH + 0.5);
  ctx.stroke();
  ctx.fillText(chart.xLabel, left + plotW / 2, h - 3);
  ctx.save();
  ctx.translate(11, top + plotH / 2);
  ctx.rotate(-Math.PI / 2);
  ctx.fillText(chart.yLabel, 0, 0);
  ctx.restore();
  ctx.textAlign = 'left';

  series.forEach((s, j) => {
    const color = PALETTE[j % PALETTE.length] ?? '#58a6ff';
    ctx.strokeStyle = color;
    ctx.fillStyle = color;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    s.points.forEach((p, i) => (i === 0 ? ctx.moveTo(x(p.t), y(p.mean)) : ctx.lineTo(x(p.t), y(p.mean))));
    ctx.stroke();
    for (const p of s.points) ctx.fillRect(x(p.t) - 2, y(p.mean) - 2, 4, 4);
    ctx.lineWidth = 1;
  });
  if (series.length === 0) {
    ctx.fillStyle = '#8b949e';
    ctx.fillText('no ended rollouts in this range', left + 8, top + plotH / 2);
  }
  legend(ctx, series.map((s, j) => ({ text: `${s.name} (n=${s.n})`, color: PALETTE[j % PALETTE.length] ?? '#58a6ff' })), w, 28);

  canvas.dataset.series = JSON.stringify(series.map((s) => ({ name: s.name, n: s.n, points: s.points.length, last: s.points[s.points.length - 1]?.mean ?? null })));
  canvas.dataset.xLabel = chart.xLabel;
  canvas.dataset.yLabel = chart.yLabel;
  canvas.dataset.xTicks = JSON.stringify(xTicks.map((tk) => tk.label));
  canvas.dataset.yTicks = JSON.stringify(yTicks.map(fmtTick));
  canvas.dataset.range = `${Math.round(t0)},${Math.round(t1)}`;
}

/** A tick value: integers as is, others with at most 3 significant decimals. @param {number} v */
function fmtTick(v) {
  if (Number.isInteger(v)) return Math.abs(v) >= 10_000 ? `${Math.round(v / 1000)}k` : String(v);
  return String(Math.round(v * 1000) / 1000);
}
