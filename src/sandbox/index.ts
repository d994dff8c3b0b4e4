export * from './sandbox.js';
export { createSandboxProvider, type HostSandboxProvider } from './sandbox-provider.js';
export { SandboxOptionsSchema, parseSandboxOptions, type SandboxOptions, type SandboxOptionsInput } from './sandbox-options.js';
export { detectDriver, type DriverDetection, type DriverName } from './drivers.js';
export { reapStale, type ReapReport } from './lease.js';
export { runSandboxHost, type SandboxHostOptions } from './sandbox-host.js';
