export * from './dialect.js';
export { AnthropicDialect } from './anthropic.js';
export { ChatDialect } from './chat.js';
export { GoogleDialect } from './google.js';
export { ResponsesDialect } from './responses.js';
export { routeFromBody, routeOf } from './detect.js';
export { createDialects } from './create-dialects.js';
