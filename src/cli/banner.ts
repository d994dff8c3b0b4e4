/**
 * The lines a server command prints once it listens, after its `listening on URL` line: one
 * `  label  value` row each, labels aligned, rows with no value left out. Plain text (no
 * colour), so a log or a test reads it as a person does.
 */
export function formatBanner(rows: ReadonlyArray<readonly [label: string, value: string | null | undefined]>): string {
  const shown = rows.filter((r): r is readonly [string, string] => typeof r[1] === 'string' && r[1] !== '');
  const width = Math.max(0, ...shown.map(([l]) => l.length));
  return shown.map(([l, v]) => `  ${l.padEnd(width)}  ${v}\n`).join('');
}
