import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { once } from 'node:events';
import { createSandboxProvider, type HostSandboxProvider, type Sandbox } from '../../../src/sandbox/index.js';
import { LLM_PROXY_PORT, LLM_PROXY_URL } from '../../../src/sandbox/llm-proxy-forwarder.js';
import { testDriver, until } from './helpers.js';

// Issue #14 (sandbox plumbing): a sandbox made with `llmProxy` reaches one host Unix socket —
// the per-rollout proxy — through a loopback listener inside its own network namespace, and
// nothing else. The stand-in proxy is a plain node HTTP server on a temp Unix socket.
const driver = testDriver();
const TOKEN = `tok-${crypto.randomBytes(8).toString('hex')}`;

/** The stand-in proxy: echoes requests, streams SSE on demand, holds requests at a barrier. */
class StandIn {
  readonly dir = fs.mkdtempSync(path.join(os.tmpdir(), 'llmproxy-'));
  readonly socketPath = path.join(this.dir, 'llm.sock');
  readonly server: http.Server;
  readonly sockets = new Set<net.Socket>();
  /** Requests seen: method, url, authorization. */
  readonly seen: { method: string; url: string; auth: string | undefined }[] = [];
  private go: (() => void) | null = null;
  private barrier: { want: number; waiting: (() => void)[] } | null = null;

  constructor() {
    // A client that vanishes mid-request (the SIGKILL test) rejects the body read: end that response.
    this.server = http.createServer((req, res) => void this.handle(req, res).catch(() => res.destroy()));
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.once('close', () => this.sockets.delete(s));
    });
  }

  async listen(): Promise<void> {
    this.server.listen(this.socketPath);
    await once(this.server, 'listening');
  }

  /** Next `want` requests to /v1/barrier are answered only once all of them are in. */
  setBarrier(want: number): void {
    this.barrier = { want, waiting: [] };
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    this.seen.push({ method: req.method!, url: req.url!, auth: req.headers.authorization });
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks);
    if (req.url === '/v1/chat/completions') {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ auth: req.headers.authorization, sha256: crypto.createHash('sha256').update(body).digest('hex'), bytes: body.length }));
    } else if (req.url === '/v1/stream') {
      // Chunked SSE: the second event waits for /v1/go, which the client sends only after it
      // has read the first event. A buffering forwarder never delivers it: the test hangs.
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.write('data: {"n":1}\n\n');
      await new Promise<void>((r) => (this.go = r));
      res.write('data: {"n":2}\n\n');
      res.end('data: [DONE]\n\n');
    } else if (req.url === '/v1/go') {
      this.go?.();
      res.end('ok');
    } else if (req.url === '/v1/barrier' && this.barrier) {
      const b = this.barrier;
      await new Promise<void>((r) => {
        b.waiting.push(r);
        if (b.waiting.length >= b.want) for (const w of b.waiting) w();
      });
      res.end(`in:${b.waiting.length}`);
    } else {
      res.statusCode = 404;
      res.end('no');
    }
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise((r) => this.server.close(r));
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Host pids whose network namespace is `ns` (e.g. `net:[4026532...]`). */
function pidsInNetns(ns: string): number[] {
  const out: number[] = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (fs.readlinkSync(`/proc/${name}/ns/net`) === ns) out.push(Number(name));
    } catch {
      // gone
    }
  }
  return out;
}

/** Runs a Python script inside the sandbox (written to the workspace) and returns its output. */
async function py(sb: Sandbox, script: string, timeoutMs = 30_000): Promise<{ output: string; exitCode: number | null }> {
  const name = `t-${crypto.randomBytes(4).toString('hex')}.py`;
  await sb.writeFile(name, script);
  const r = await sb.bash({ command: `python3 ${name}`, timeoutMs });
  return { output: r.output, exitCode: r.exitCode };
}

describe.runIf(driver !== 'none')(`LLM proxy plumbing with the ${driver} driver`, () => {
  let stateDir: string;
  let provider: HostSandboxProvider;
  let proxy: StandIn;
  let sb: Sandbox;
  let hostTcp: net.Server;
  let hostTcpPort: number;
  let hostTcpConnections = 0;

  beforeAll(async () => {
    stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sbx-llmproxy-'));
    provider = createSandboxProvider({ driver, hosts: 1, stateDir, timeouts: { bashMs: 30_000, noOutputMs: 30_000 } });
    proxy = new StandIn();
    await proxy.listen();
    // A service on the host's loopback: the sandbox must not reach it.
    hostTcp = net.createServer((s) => s.end('pong\n'));
    hostTcp.on('connection', () => hostTcpConnections++);
    hostTcp.listen(0, '127.0.0.1');
    await once(hostTcp, 'listening');
    hostTcpPort = (hostTcp.address() as net.AddressInfo).port;
    sb = await provider.create({ llmProxy: { socketPath: proxy.socketPath, token: TOKEN } }, { rolloutId: 'llm-proxy' });
  });
  afterAll(async () => {
    await sb?.close();
    await provider?.close();
    hostTcp?.close();
    await proxy?.close();
    if (stateDir) fs.rmSync(stateDir, { recursive: true, force: true });
  });

  it('exposes the URL and gives every process OPENAI_BASE_URL and OPENAI_API_KEY', async () => {
    expect(sb.llmProxyUrl).toBe(LLM_PROXY_URL);
    expect(LLM_PROXY_URL).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v1$/);
    const r = await sb.bash({ command: 'echo "$OPENAI_BASE_URL|$OPENAI_API_KEY"' });
    expect(r.output.trim()).toBe(`${LLM_PROXY_URL}|${TOKEN}`);
    const p = await sb.python('import os; (os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"])');
    expect(p.output).toContain(`('${LLM_PROXY_URL}', '${TOKEN}')`);
    // A task's env cannot point the harness elsewhere.
    const other = await provider.create({ env: { OPENAI_BASE_URL: 'http://evil/v1' }, llmProxy: { socketPath: proxy.socketPath, token: 'x' } }, { rolloutId: 'llm-proxy-env' });
    try {
      expect((await other.bash({ command: 'echo $OPENAI_BASE_URL' })).output.trim()).toBe(LLM_PROXY_URL);
    } finally {
      await other.close();
    }
  });

  it('a sandbox without llmProxy has neither the variables nor the listener', async () => {
    const plain = await provider.create({}, { rolloutId: 'llm-proxy-none' });
    try {
      expect(plain.llmProxyUrl).toBeUndefined();
      const r = await plain.bash({ command: `echo "[$OPENAI_BASE_URL]"; (exec 3<>/dev/tcp/127.0.0.1/${LLM_PROXY_PORT}) 2>/dev/null; echo rc=$?` });
      expect(r.output).toContain('[]');
      expect(r.output).toContain('rc=1');
    } finally {
      await plain.close();
    }
  });

  it('forwards a chat request byte for byte, with the bearer token, via $OPENAI_BASE_URL', async () => {
    const r = await py(
      sb,
      `
import hashlib, json, os, urllib.request
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "h\\u00e9llo " + "x" * 300000}]}).encode()
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body,
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
got = json.load(urllib.request.urlopen(req, timeout=20))
print("OK" if got["sha256"] == hashlib.sha256(body).hexdigest() and got["bytes"] == len(body) else "BAD", got["auth"])
`,
    );
    expect(r.exitCode).toBe(0);
    expect(r.output.trim()).toBe(`OK Bearer ${TOKEN}`);
  });

  it('streams a chunked SSE response through unbuffered', async () => {
    const r = await py(
      sb,
      `
import os, urllib.request
base = os.environ["OPENAI_BASE_URL"]
resp = urllib.request.urlopen(urllib.request.Request(base + "/stream", data=b"{}"), timeout=20)
print("first:", resp.readline().decode().strip(), flush=True)
resp.readline()
# The proxy sends the rest only after this request: only an unbuffered path gets here.
urllib.request.urlopen(base + "/go", timeout=20).read()
print("rest:", resp.read().decode().replace("\\n\\n", " | ").strip())
`,
    );
    expect(r.exitCode).toBe(0);
    expect(r.output).toContain('first: data: {"n":1}');
    expect(r.output).toContain('rest: data: {"n":2} | data: [DONE]');
  });

  it('carries 50 parallel connections at once', async () => {
    proxy.setBarrier(50);
    const r = await py(
      sb,
      `
import os, threading, urllib.request
base = os.environ["OPENAI_BASE_URL"]
out = []
def one():
    out.append(urllib.request.urlopen(base + "/barrier", timeout=60).read().decode())
ts = [threading.Thread(target=one) for _ in range(50)]
[t.start() for t in ts]
[t.join() for t in ts]
print(len(out), sorted(set(out)))
`,
      90_000,
    );
    expect(r.exitCode).toBe(0);
    expect(r.output.trim()).toBe("50 ['in:50']");
    // Every connection is closed both ways once the answers are in.
    await until(() => proxy.sockets.size === 0);
  });

  it('reaches the proxy and nothing else on loopback (other ports refused, the host’s loopback out of reach)', async () => {
    hostTcpConnections = 0;
    const r = await py(
      sb,
      `
import socket
for port in (${hostTcpPort}, ${LLM_PROXY_PORT + 1}, 22, 80, 6379):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect(("127.0.0.1", port))
        print(port, "OPEN")
    except ConnectionRefusedError:
        print(port, "refused")
    except Exception as e:
        print(port, type(e).__name__)
    finally:
        s.close()
s = socket.socket()
s.settimeout(3)
try:
    s.connect(("10.0.2.2", ${hostTcpPort}))
    print("gw OPEN")
except OSError as e:
    print("gw", type(e).__name__)
`,
    );
    expect(r.exitCode).toBe(0);
    expect(r.output).not.toContain('OPEN');
    for (const port of [hostTcpPort, LLM_PROXY_PORT + 1, 22, 80, 6379]) expect(r.output).toContain(`${port} refused`);
    expect(r.output).toMatch(/gw (OSError|ConnectionRefusedError|TimeoutError)/);
    expect(hostTcpConnections).toBe(0);
  });

  it('shows the proxy socket at /run/rollout/llm.sock, read-only dir, connectable', async () => {
    const r = await py(
      sb,
      `
import os, socket, stat
p = "/run/rollout/llm.sock"
print("sock" if stat.S_ISSOCK(os.stat(p).st_mode) else "notsock")
s = socket.socket(socket.AF_UNIX)
s.connect(p)
s.sendall(b"POST /v1/chat/completions HTTP/1.1\\r\\nHost: x\\r\\nAuthorization: Bearer t\\r\\nContent-Length: 2\\r\\nConnection: close\\r\\n\\r\\n{}")
data = b""
while True:
    c = s.recv(65536)
    if not c: break
    data += c
print(data.split(b"\\r\\n")[0].decode())
try:
    open("/run/rollout/other", "w")
    print("writable")
except OSError:
    print("ro")
`,
    );
    expect(r.exitCode).toBe(0);
    expect(r.output).toContain('sock');
    expect(r.output).toContain('HTTP/1.1 200 OK');
    expect(r.output).toContain('ro');
  });

  it('a restarted shell (new namespace) gets a new listener', async () => {
    await sb.bash({ command: 'exit 3' });
    const r = await py(sb, `import os, urllib.request; print(urllib.request.urlopen(os.environ["OPENAI_BASE_URL"] + "/go", timeout=10).read().decode())`);
    expect(r.output.trim()).toBe('ok');
  });

  it('refuses a spec whose socket is missing or a bad token, naming the field', async () => {
    await expect(provider.create({ llmProxy: { socketPath: path.join(proxy.dir, 'nope.sock'), token: 't' } }, { rolloutId: 'bad-1' })).rejects.toThrow(/llmProxy\.socketPath: no such socket/);
    await expect(provider.create({ llmProxy: { socketPath: 'relative.sock', token: 't' } }, { rolloutId: 'bad-2' })).rejects.toThrow(/llmProxy.*socketPath.*absolute/s);
    await expect(provider.create({ llmProxy: { socketPath: proxy.socketPath, token: 'a b' } }, { rolloutId: 'bad-3' })).rejects.toThrow(/llmProxy.*token/s);
  });

  it('leaves nothing behind after close: no process in the namespace, no connection to the proxy', async () => {
    const s2 = await provider.create({ llmProxy: { socketPath: proxy.socketPath, token: TOKEN } }, { rolloutId: 'llm-proxy-close' });
    const ns = (await s2.bash({ command: 'readlink /proc/self/ns/net' })).output.trim();
    expect(ns).toMatch(/^net:\[\d+\]$/);
    // A stream held open from inside, in the background.
    await s2.writeFile('hold.py', `import os, urllib.request, time\nr = urllib.request.urlopen(urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/stream", data=b"{}"))\nr.readline()\ntime.sleep(600)\n`);
    const before = proxy.sockets.size;
    await s2.bash({ command: 'python3 hold.py >/dev/null 2>&1 &' });
    await until(() => proxy.sockets.size > before);
    expect(pidsInNetns(ns).length).toBeGreaterThan(0);
    await s2.close();
    await until(() => pidsInNetns(ns).length === 0 && proxy.sockets.size === before);
    proxy.seen.length = 0;
  });

  it('leaves nothing behind when the sandbox host is SIGKILLed and reaped', async () => {
    const p2 = createSandboxProvider({ driver, hosts: 1, stateDir, timeouts: { bashMs: 30_000, noOutputMs: 30_000 } });
    try {
      const s3 = await p2.create({ llmProxy: { socketPath: proxy.socketPath, token: TOKEN } }, { rolloutId: 'llm-proxy-kill' });
      const ns = (await s3.bash({ command: 'readlink /proc/self/ns/net' })).output.trim();
      await s3.writeFile('hold.py', `import os, urllib.request, time\nr = urllib.request.urlopen(urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/stream", data=b"{}"))\nr.readline()\ntime.sleep(600)\n`);
      const before = proxy.sockets.size;
      await s3.bash({ command: 'python3 hold.py >/dev/null 2>&1 &' });
      await until(() => proxy.sockets.size > before);
      process.kill(p2.hostPids()[0]!, 'SIGKILL');
      await until(() => p2.hostPids().length === 0);
      await until(() => pidsInNetns(ns).length === 0 && proxy.sockets.size === before);
      await expect(s3.bash({ command: 'true' })).rejects.toThrow(/lost|closed/);
    } finally {
      await p2.close();
    }
  });
});

// The `none` driver (development only) shares the host's network: the listener is an ephemeral
// port of the host's loopback, and the URL names it.
describe('LLM proxy plumbing with the none driver', () => {
  it('listens on an ephemeral host port, forwards to the socket and stops listening on close', async () => {
    const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sbx-llmproxy-none-'));
    const provider = createSandboxProvider({ driver: 'none', hosts: 1, stateDir });
    const proxy = new StandIn();
    await proxy.listen();
    try {
      const sb = await provider.create({ llmProxy: { socketPath: proxy.socketPath, token: TOKEN } }, { rolloutId: 'llm-proxy-none-driver' });
      const url = sb.llmProxyUrl!;
      expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v1$/);
      expect(url).not.toBe(LLM_PROXY_URL);
      const r = await py(sb, `import os, urllib.request; print(os.environ["OPENAI_BASE_URL"], urllib.request.urlopen(os.environ["OPENAI_BASE_URL"] + "/go", timeout=10).read().decode())`);
      expect(r.output.trim()).toBe(`${url} ok`);
      await sb.close();
      const port = Number(new URL(url).port);
      const refused = await new Promise<boolean>((resolve) => {
        const s = net.connect(port, '127.0.0.1');
        s.once('connect', () => (s.destroy(), resolve(false)));
        s.once('error', () => resolve(true));
      });
      expect(refused).toBe(true);
    } finally {
      await provider.close();
      await proxy.close();
      fs.rmSync(stateDir, { recursive: true, force: true });
    }
  });
});
