import { TaskError } from '../errors.js';
import type { AgentHandler } from '../proxy/agent-contract.js';

/**
 * Routes `instance.data_source` to an {@link AgentHandler}, by name or alias. Registering a name
 * or alias that is already taken replaces the earlier handler for it (so users can override a
 * built-in handler by registering their own under the same name).
 */
export class HandlerRegistry {
  private readonly byKey = new Map<string, AgentHandler>();
  /** Prefix routes, longest first (a more specific prefix wins). */
  private prefixes: [string, AgentHandler][] = [];

  constructor(handlers: Iterable<AgentHandler> = []) {
    for (const h of handlers) this.register(h);
  }

  /** Adds a handler under its name and aliases. Throws TypeError on a nameless handler. */
  register(handler: AgentHandler): this {
    if (!handler?.name) throw new TypeError('a handler needs a name');
    this.byKey.set(handler.name, handler);
    for (const a of handler.aliases ?? []) this.byKey.set(a, handler);
    for (const p of handler.prefixes ?? []) {
      this.prefixes = this.prefixes.filter(([q]) => q !== p);
      this.prefixes.push([p, handler]);
    }
    this.prefixes.sort((a, b) => b[0].length - a[0].length);
    return this;
  }

  /**
   * The handler for a data_source. Throws {@link TaskError} (code `UNKNOWN_DATA_SOURCE`, not
   * retried) naming it and listing the known ones.
   */
  resolve(dataSource: string): AgentHandler {
    const h = this.byKey.get(dataSource) ?? this.byPrefix(dataSource);
    if (h) return h;
    const known = this.keys();
    throw new TaskError(`unknown data_source '${dataSource}'; known: ${known.length ? known.join(', ') : '(none registered)'}`, {
      code: 'UNKNOWN_DATA_SOURCE',
      details: { dataSource, known },
    });
  }

  has(dataSource: string): boolean {
    return this.byKey.has(dataSource) || this.byPrefix(dataSource) !== undefined;
  }

  /** Every routable data_source, sorted: names and aliases, and each prefix as `prefix*`. */
  keys(): string[] {
    return [...this.byKey.keys(), ...this.prefixes.map(([p]) => `${p}*`)].sort();
  }

  private byPrefix(dataSource: string): AgentHandler | undefined {
    for (const [p, h] of this.prefixes) if (dataSource.startsWith(p)) return h;
    return undefined;
  }
}

/**
 * True when `dataSource` is routed by one of `keys` as {@link HandlerRegistry.keys} lists them:
 * an exact name or alias, or a `prefix*` entry it starts with. For callers that hold only the list
 * (the HTTP service, `rollout run`'s task-file check).
 */
export function routesDataSource(keys: Iterable<string>, dataSource: string): boolean {
  for (const k of keys) if (k === dataSource || (k.endsWith('*') && dataSource.startsWith(k.slice(0, -1)))) return true;
  return false;
}
