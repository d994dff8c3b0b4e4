/**
 * The lines a server command prints once it listens, after its `listening on URL` line: one
 * `  label  value` row each, labels aligned, rows with no value left out. Plain text (no
 * colour), so a log or a test reads it as a person does. URL credentials in a value are redacted
 * ({@link redactUrlCredentials}).
 */
export function formatBanner(rows: ReadonlyArray<readonly [label: string, value: string | null | undefined]>): string {
  const shown = rows.filter((r): r is readonly [string, string] => typeof r[1] === 'string' && r[1] !== '');
  const width = Math.max(0, ...shown.map(([l]) => l.length));
  return shown.map(([l, v]) => `  ${l.padEnd(width)}  ${redactUrlCredentials(v)}\n`).join('');
}

/**
 * `text` with the password of every `scheme://user:password@` URL in it as `***`
 * (`redis://:***@host:6379`); credentials without a colon (`redis://secret@host`, which Redis
 * reads as a password) become `***` whole. A banner is read over shoulders and kept in logs
 * (issue #28 §5.8: the gateway printed its Redis password).
 */
export function redactUrlCredentials(text: string): string {
  return text.replace(/\b([a-z][a-z0-9+.-]*:\/\/)([^\s/?#@]*)@/gi, (_m, scheme: string, info: string) => {
    const colon = info.indexOf(':');
    return `${scheme}${colon >= 0 ? `${info.slice(0, colon)}:***` : '***'}@`;
  });
}
