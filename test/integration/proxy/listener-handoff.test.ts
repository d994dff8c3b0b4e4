import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LlmProxy } from '../../../src/proxy/llm-proxy.js';
import { createSandboxProvider, type HostSandboxProvider, type Sandbox } from '../../../src/sandbox/index.js';
import { testDriver } from '../sandbox/helpers.js';

// Issue #14 (proxy overhead): the sandbox host hands the in-namespace listener to the runtime
// process whose LlmProxy listens on the spec's socket path, which then serves the harness's
// connections itself — no forwarding process between them (src/sandbox/llm-listener-handoff.ts).
// A proxy in another process (a stand-in server) keeps the host's forwarding: the plumbing tests
// in test/integration/sandbox/llm-proxy-forwarder.test.ts run that path.
const driver = testDriver();
const TOKEN = `rk-${crypto.randomBytes(12).toString('hex')}`;

/** Runs a Python script in the sandbox and returns its trimmed output. */
async function py(sb: Sandbox, script: string): Promise<string> {
  const name = `t-${crypto.randomBytes(4).toString('hex')}.py`;
  await sb.writeFile(name, script);
  return (await sb.bash({ command: `python3 ${name}`, timeoutMs: 30_000 })).output.trim();
}

const MODELS = `import os, urllib.request
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/models", headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
print(urllib.request.urlopen(req, timeout=10).read().decode())`;

describe.runIf(driver !== 'none')(`the LLM proxy serves its sandbox's listener itself (${driver})`, { timeout: 60_000 }, () => {
  let dir: string;
  let provider: HostSandboxProvider;
  let proxy: LlmProxy;
  let sb: Sandbox;

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'llm-handoff-'));
    fs.chmodSync(dir, 0o755);
    provider = createSandboxProvider({ driver, hosts: 1, stateDir: path.join(dir, 'state'), timeouts: { bashMs: 30_000, noOutputMs: 30_000 } });
    proxy = await LlmProxy.listen({ socketPath: path.join(dir, 'llm.sock'), token: TOKEN });
    sb = await provider.create({ network: false, llmProxy: { socketPath: proxy.socketPath, token: TOKEN } }, { rolloutId: 'handoff' });
  });
  afterAll(async () => {
    await sb?.close();
    await provider?.close();
    await proxy?.close();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('takes the listener when the sandbox starts and answers the harness over it', async () => {
    expect(proxy.adoptedListeners).toBe(1);
    const out = await py(sb, MODELS);
    expect(JSON.parse(out)).toMatchObject({ object: 'list', data: [{ id: 'rollout-policy' }] });
    // Came in by the adopted listener, not through the host's Unix-socket forwarding.
    expect(proxy.stats.listenerConnections).toBe(1);
    expect(proxy.stats.byStatus.get(200)).toBe(1);
  });

  it('refuses a wrong token on the adopted listener as on the socket', async () => {
    const out = await py(sb, `import os, urllib.request, urllib.error
try:
    urllib.request.urlopen(urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/models", headers={"Authorization": "Bearer nope"}), timeout=10)
except urllib.error.HTTPError as e:
    print(e.code)`);
    expect(out).toBe('401');
  });

  it("a restarted shell's new namespace replaces the listener", async () => {
    const before = proxy.stats.listenerConnections;
    await sb.bash({ command: 'exit 3' });
    const out = await py(sb, MODELS);
    expect(JSON.parse(out)).toMatchObject({ object: 'list' });
    expect(proxy.adoptedListeners).toBe(1);
    expect(proxy.stats.listenerConnections).toBe(before + 1);
  });

  it('closing the proxy closes the listener: nothing in the sandbox accepts on the port any more', async () => {
    await proxy.close();
    expect(proxy.adoptedListeners).toBe(0);
    // The host stopped accepting when it handed the listener over; the proxy's copy is closed now.
    const out = await py(sb, `import socket
s = socket.socket()
s.settimeout(5)
try:
    s.connect(("127.0.0.1", 18400))
    print("connected")
except ConnectionRefusedError:
    print("refused")`);
    expect(out).toBe('refused');
  });
});
