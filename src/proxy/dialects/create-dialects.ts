import { AnthropicDialect } from './anthropic.js';
import { ChatDialect } from './chat.js';
import { GoogleDialect } from './google.js';
import { ResponsesDialect } from './responses.js';
import type { Dialect, DialectName } from './dialect.js';

/** One reader and writer per dialect, for one proxy (the chat reader keeps per-rollout state). */
export function createDialects(): Record<DialectName, Dialect> {
  return { chat: new ChatDialect(), responses: new ResponsesDialect(), anthropic: new AnthropicDialect(), google: new GoogleDialect() };
}
