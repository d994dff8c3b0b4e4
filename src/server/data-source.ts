import { routesDataSource } from '../handlers/registry.js';
import { HttpError } from './http-error.js';
import type { ServiceRuntime } from './service-runtime.js';

/**
 * Refuses an instance whose `data_source` no handler serves (names, aliases, and `prefix*` routes), with a 400 naming the field and the
 * known sources. Skipped when the runtime does not tell (its submit then decides).
 */
export function checkDataSource(rt: ServiceRuntime, dataSource: string, path: string): void {
  const known = rt.dataSources?.();
  // `name*` entries are prefix routes (any `deepcoder...` goes to the code handler).
  if (!known || routesDataSource(known, dataSource)) return;
  throw new HttpError(400, 'UNKNOWN_DATA_SOURCE', `unknown data_source '${dataSource.slice(0, 200)}'`, { issues: [{ path, message: `expected one of: ${known.join(', ')}` }] });
}
