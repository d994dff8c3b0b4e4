/** Small statistics helpers shared by the benchmarks. */

/** The median of `xs` (NaN when empty). */
export function median(xs: readonly number[]): number {
  return quantile(xs, 0.5);
}

/** The q-quantile of `xs` with linear interpolation (NaN when empty). */
export function quantile(xs: readonly number[], q: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const pos = (s.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return s[lo]! + (s[hi]! - s[lo]!) * (pos - lo);
}

/** Rounds to `digits` significant decimals for printing. */
export function round(x: number, digits = 3): number {
  if (!Number.isFinite(x)) return x;
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

/** Prints the figures and, as the last line, the one JSON object the bench runner reads. */
export function report(bench: string, figures: Record<string, number | string | boolean>): void {
  for (const [k, v] of Object.entries(figures)) console.log(`${k.padEnd(36)} ${v}`);
  console.log(JSON.stringify({ bench, figures }));
}
