export * from './messages.js';
export * from './instance.js';
export * from './integrity.js';
export * from './trajectory.js';
export * from './events.js';
export * from './http.js';
export * from './ipc.js';
export * from './sandbox.js';
