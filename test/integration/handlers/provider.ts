import { createSandboxProvider } from '../../../src/sandbox/index.js';
import type { SandboxProvider } from '../../../src/sandbox/sandbox.js';

/**
 * The sandbox provider the handler integration tests run on: the real one (sandbox hosts, bwrap
 * when it works), with its state dir inside the test's temp dir so nothing is left behind.
 */
export async function makeProvider(root: string): Promise<SandboxProvider> {
  return createSandboxProvider({ stateDir: root, hosts: 2 });
}
