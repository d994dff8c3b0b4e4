import { chmodSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IntegrityViolation } from '../../../src/protocol/integrity.js';
import { createSandboxProvider } from '../../../src/sandbox/index.js';
import type { Sandbox, SandboxProvider } from '../../../src/sandbox/sandbox.js';
import { testDriver } from '../sandbox/helpers.js';
import { missingTools, skipNote } from '../../helpers/system-tools.js';

/**
 * Network attempts out of a sandbox without network, with their address (#27): the root
 * observer puts a TUN device in the sandbox's network namespace as its default route and
 * answers each TCP SYN with a RST and each UDP datagram with an ICMP port unreachable, so an
 * attempt is refused at once (as before) and recorded with its destination, at the action
 * that made it. Real bwrap sandboxes, real sockets.
 */
const noObserver = process.getuid?.() !== 0 ? 'needs root (the observer sets up the TUN device)' : missingTools('python3');

let root: string;
let provider: SandboxProvider;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'integrity-net-'));
  chmodSync(root, 0o711);
  provider = createSandboxProvider({ driver: testDriver(), stateDir: root, hosts: 1 });
});
afterAll(async () => {
  await provider?.close();
  await rm(root, { recursive: true, force: true });
});

const py = (code: string): string => `python3 -c '${code}'`;
const net = (vs: IntegrityViolation[]) => vs.filter((v) => v.kind === 'network').map(({ turn, proto, address }) => ({ turn, proto, address }));

async function withSandbox(spec: Record<string, unknown>, fn: (sb: Sandbox) => Promise<void>): Promise<void> {
  const sb = await provider.create({ files: { 'a.txt': 'a\n' }, ...spec }, { rolloutId: `integrity-net-${Math.random().toString(36).slice(2)}` });
  try {
    await fn(sb);
  } finally {
    await sb.close();
  }
}

describe.skipIf(noObserver !== null || testDriver() === 'none')(`network attempts are recorded with their address${skipNote(noObserver)}`, () => {
  it('a TCP connect out is refused at once and reported at its turn with address and protocol', async () => {
    await withSandbox({}, async (sb) => {
      const start = await sb.integrity!({ op: 'start', protect: [] });
      expect(start.unobserved ?? []).toEqual([]);
      await sb.bash({ command: 'cat a.txt' });
      expect(net((await sb.integrity!({ op: 'observe', turn: 0 })).violations)).toEqual([]);
      const out = await sb.bash({ command: py('import socket\ntry: socket.create_connection(("203.0.113.7", 443), 20)\nexcept OSError as e: print("errno", e.errno)') });
      expect(out.output).toContain('errno 111');
      const o = await sb.integrity!({ op: 'observe', turn: 1 });
      expect(net(o.violations)).toEqual([{ turn: 1, proto: 'tcp', address: '203.0.113.7:443' }]);
      expect(o.violations[0]!.detail).toMatch(/1 TCP attempt to 203\.0\.113\.7:443 refused/);
    });
  });
});
