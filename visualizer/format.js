// One way to write a duration everywhere on the page (table, timeline, summaries), so "1.2s",
// "1.20 s" and "1 m 2 s" never sit side by side.
// @ts-check

/**
 * A duration for people, always in the same units: `0.04s`, `4.2s`, `42s`, `1m05s`, `2h03m`.
 * @param {number} ms
 */
export function fmtElapsed(ms) {
  if (!Number.isFinite(ms) || ms < 0) ms = 0;
  if (ms < 1000) return `${(ms / 1000).toFixed(2)}s`;
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)}s`;
  if (ms < 60_000) return `${Math.floor(ms / 1000)}s`;
  if (ms < 3_600_000) return `${Math.floor(ms / 60_000)}m${String(Math.floor((ms % 60_000) / 1000)).padStart(2, '0')}s`;
  return `${Math.floor(ms / 3_600_000)}h${String(Math.floor((ms % 3_600_000) / 60_000)).padStart(2, '0')}m`;
}

/**
 * A reward for a table cell: at most 3 decimals, nothing when there is none.
 * @param {number|null|undefined} x
 */
export function fmtReward(x) {
  return x === null || x === undefined ? '' : String(Math.round(x * 1000) / 1000);
}

/**
 * A backend's state as the page shows it: `degraded` (failing its health probes, out of
 * selection — also a backend that never answered) reads `down`; the others as the API says.
 * @param {string} state
 */
export function backendStateLabel(state) {
  return state === 'degraded' ? 'down' : state;
}

/**
 * Integrity violations by kind (#27) for a tooltip: `2 edit-protected, 1 read-secret`, most
 * frequent first; '' when there are none.
 * @param {Record<string, number> | null | undefined} violations
 */
export function fmtViolations(violations) {
  if (!violations) return '';
  return Object.entries(violations)
    .filter(([, n]) => n > 0)
    .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))
    .map(([kind, n]) => `${n} ${kind}`)
    .join(', ');
}

/**
 * The number of violations in a kind → count record.
 * @param {Record<string, number> | null | undefined} violations
 */
export function violationTotal(violations) {
  let n = 0;
  for (const v of Object.values(violations ?? {})) n += v;
  return n;
}
