export * from './messages.js';
export * from './instance.js';
export * from './trajectory.js';
export * from './events.js';
