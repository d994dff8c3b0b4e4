// Hand-written canvas charts: stacked bars of outcomes per second, a line of LLM calls per
// second, and per-backend load. Each draw clears and repaints; they run at most once a frame.

export const OUTCOME_COLORS = {
  completed: '#3fb950',
  truncated: '#d29922',
  'timed-out': '#db6d28',
  cancelled: '#8b949e',
  'infra-error': '#f85149',
  'task-error': '#bc8cff',
};
const PALETTE = ['#58a6ff', '#3fb950', '#d29922', '#f778ba', '#a371f7', '#39c5cf', '#db6d28', '#8b949e'];

function prepare(canvas) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 300;
  const h = canvas.clientHeight || 120;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
  }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  ctx.font = '10px ui-monospace, monospace';
  return { ctx, w, h };
}

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

/** In-flight requests per backend over the recent snapshots (lines) and now (labels). */
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
    const text = `${b.id} ${b.state} ${b.inFlight} in flight${b.latencyMs !== null ? `, ${Math.round(b.latencyMs)} ms` : ''}`;
    ctx.fillText(text, x, h - 2);
    x += ctx.measureText(text).width + 12;
  });
  if (backends.length === 0) {
    ctx.fillStyle = '#8b949e';
    ctx.fillText('no backend snapshot yet', 4, h - 2);
  }
  axes(ctx, w, h, max, 'in-flight LLM requests per backend');
}

/** One horizontal bar split by count: rollouts per state, or per outcome. */
export function drawSplitBar(canvas, counts, colors, title) {
  const { ctx, w } = prepare(canvas);
  const entries = Object.entries(counts).filter(([, n]) => n > 0);
  const total = entries.reduce((a, [, n]) => a + n, 0);
  ctx.fillStyle = '#8b949e';
  ctx.fillText(`${title} (${total})`, 4, 10);
  let x = 0;
  let legendX = 4;
  entries.forEach(([key, n], j) => {
    const bw = total === 0 ? 0 : (n / total) * w;
    ctx.fillStyle = colors[key] ?? PALETTE[j % PALETTE.length];
    ctx.fillRect(x, 16, bw, 14);
    x += bw;
    const text = `${key} ${n}`;
    ctx.fillText(text, legendX, 44);
    legendX += ctx.measureText(text).width + 10;
  });
}
