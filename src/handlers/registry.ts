import { TaskError } from '../errors.js';
import type { AgentHandler } from './agent-handler.js';

/**
 * Routes `instance.data_source` to an {@link AgentHandler}, by name or alias. Registering a name
 * or alias that is already taken replaces the earlier handler for it (so users can override a
 * built-in handler by registering their own under the same name).
 */
export class HandlerRegistry {
  private readonly byKey = new Map<string, AgentHandler>();

  constructor(handlers: Iterable<AgentHandler> = []) {
    for (const h of handlers) this.register(h);
  }

  /** Adds a handler under its name and aliases. Throws TypeError on a nameless handler. */
  register(handler: AgentHandler): this {
    if (!handler?.name) throw new TypeError('a handler needs a name');
    this.byKey.set(handler.name, handler);
    for (const a of handler.aliases ?? []) this.byKey.set(a, handler);
    return this;
  }

  /**
   * The handler for a data_source. Throws {@link TaskError} (code `UNKNOWN_DATA_SOURCE`, not
   * retried) naming it and listing the known ones.
   */
  resolve(dataSource: string): AgentHandler {
    const h = this.byKey.get(dataSource);
    if (h) return h;
    const known = this.keys();
    throw new TaskError(`unknown data_source '${dataSource}'; known: ${known.length ? known.join(', ') : '(none registered)'}`, {
      code: 'UNKNOWN_DATA_SOURCE',
      details: { dataSource, known },
    });
  }

  has(dataSource: string): boolean {
    return this.byKey.has(dataSource);
  }

  /** Every routable data_source (names and aliases), sorted. */
  keys(): string[] {
    return [...this.byKey.keys()].sort();
  }
}
