import type { SandboxProvider } from '../../../src/sandbox/sandbox.js';
import { createLocalSandbox } from '../../unit/handlers/tasks/local-sandbox.js';

/** The sandbox provider the handler integration tests run on. */
export async function makeProvider(root: string): Promise<SandboxProvider> {
  const live = new Set<{ close(): Promise<void> }>();
  return {
    async create(spec) {
      const sb = await createLocalSandbox(spec, root);
      live.add(sb);
      return sb;
    },
    async close() {
      await Promise.all([...live].map((s) => s.close()));
    },
  };
}
