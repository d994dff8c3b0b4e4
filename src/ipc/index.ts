export * from './frame-codec.js';
export * from './uds-channel.js';
