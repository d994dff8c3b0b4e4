import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { once } from 'node:events';
import { createSandboxProvider, type HostSandboxProvider } from '../../../src/sandbox/index.js';
import { ImageStore } from '../../../src/sandbox/images/image-store.js';
import { LLM_PROXY_URL } from '../../../src/sandbox/llm-proxy-forwarder.js';
import { busyboxBashLayer, writeOciLayout } from '../../helpers/images/oci-fixture.js';
import { missingTools } from '../../helpers/system-tools.js';

// Issue #14: the LLM proxy listener needs nothing inside the sandbox's root — an image with
// only busybox and bash (no node, no python) reaches the proxy through $OPENAI_BASE_URL.
const why = process.getuid?.() !== 0 ? 'needs root (kernel overlayfs)' : missingTools('bwrap', 'busybox');

describe.skipIf(why !== null)(`LLM proxy in an image sandbox${why ? ` (skipped: ${why})` : ''}`, () => {
  let dir: string;
  let provider: HostSandboxProvider;
  let server: http.Server;
  let socketPath: string;

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'llmproxy-img-'));
    fs.chmodSync(dir, 0o711);
    const base = busyboxBashLayer(dir);
    if (!base) throw new Error('busybox is missing: apt-get install busybox-static');
    writeOciLayout(path.join(dir, 'layout'), [base], { Env: ['PATH=/bin'], WorkingDir: '/workspace' });
    const store = new ImageStore(path.join(dir, 'store'));
    await store.import(path.join(dir, 'layout'), { name: 'bb' });
    const proxyDir = fs.mkdtempSync(path.join(os.tmpdir(), 'llmproxy-img-sock-'));
    socketPath = path.join(proxyDir, 'llm.sock');
    server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => res.end(`${req.method} ${req.url} ${req.headers.authorization} ${Buffer.concat(chunks).toString()}`));
    });
    server.listen(socketPath);
    await once(server, 'listening');
    provider = createSandboxProvider({ driver: 'bwrap', hosts: 1, stateDir: path.join(dir, 'state'), imageStore: store.dir, timeouts: { bashMs: 20_000, noOutputMs: 20_000 } });
  }, 60_000);

  afterAll(async () => {
    await provider?.close();
    server?.close();
    if (socketPath) fs.rmSync(path.dirname(socketPath), { recursive: true, force: true });
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('busybox wget inside the image reaches the proxy with the token', async () => {
    const sb = await provider.create({ image: 'bb', llmProxy: { socketPath, token: 'img-token' } }, { rolloutId: 'llm-proxy-img' });
    try {
      expect(sb.llmProxyUrl).toBe(LLM_PROXY_URL);
      const r = await sb.bash({ command: 'test -e /usr/bin/python3 || echo no-python; wget -q -O - --header "Authorization: Bearer $OPENAI_API_KEY" --post-data \'{"x":1}\' "$OPENAI_BASE_URL/chat/completions"' });
      expect(r.output).toContain('no-python');
      expect(r.output).toContain('POST /v1/chat/completions Bearer img-token {"x":1}');
    } finally {
      await sb.close();
    }
  });
});
