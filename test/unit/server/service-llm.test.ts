import { describe, expect, it } from 'vitest';
import { ServiceLlm } from '../../../src/server/service-llm.js';
import { parseAddress } from '../../../src/server/service-address.js';
import type { BackendInfo, BackendSpec, GenerateRequest, GenerateResult, ManagedLlmClient } from '../../../src/llm/llm-client.js';
import { BackendError } from '../../../src/errors.js';

/** A pool that answers with its own backend id; no network. */
class FakePool implements ManagedLlmClient {
  backends = new Map<string, BackendInfo>();
  addBackend(spec: BackendSpec): BackendInfo {
    const b: BackendInfo = { id: spec.id ?? spec.url, url: spec.url, protocol: spec.protocol, state: 'healthy', inFlight: 0, served: 0, failures: 0, weightVersion: null, latencyMs: null };
    this.backends.set(b.id, b);
    return b;
  }
  drainBackend(id: string): boolean {
    const b = this.backends.get(id);
    if (b) b.state = 'draining';
    return !!b;
  }
  removeBackend(id: string): boolean {
    return this.backends.delete(id);
  }
  listBackends(): BackendInfo[] {
    return [...this.backends.values()].map((b) => ({ ...b }));
  }
  setWeightVersion(): void {}
  async generate(): Promise<GenerateResult> {
    const b = [...this.backends.values()].find((x) => x.state === 'healthy');
    if (!b) throw new BackendError('none healthy');
    return { outputIds: [9], logprobs: [-1], backendId: b.id, weightVersion: null, finishReason: 'stop' };
  }
}

const scripted = () => ({ generate: async (): Promise<GenerateResult> => ({ outputIds: [1, 2], logprobs: [-0.1, -0.2], backendId: 'x', weightVersion: null, finishReason: 'stop' as const }) });
const req = { rolloutId: 'r', instance: { data_source: 'shell' }, turn: 0, promptIds: [1], maxTokens: 10, sampling: {}, signal: new AbortController().signal } as GenerateRequest;

describe('ServiceLlm', () => {
  it('routes every call to the oracle backend when it is the only backend', async () => {
    const llm = new ServiceLlm(new FakePool(), scripted);
    llm.addBackend(parseAddress('oracle'));
    expect((await llm.generate(req)).backendId).toBe('oracle');
    expect(llm.listBackends()).toMatchObject([{ id: 'oracle', served: 1, inFlight: 0 }]);
  });

  it('prefers a usable pool backend over the oracle backend', async () => {
    const llm = new ServiceLlm(new FakePool(), scripted);
    llm.addBackend(parseAddress('oracle'));
    llm.addBackend(parseAddress('http://127.0.0.1:9', { id: 'real' }));
    expect((await llm.generate(req)).backendId).toBe('real');
  });

  it('falls back to the oracle backend once the pool backends drain', async () => {
    const llm = new ServiceLlm(new FakePool(), scripted);
    llm.addBackend(parseAddress('oracle'));
    llm.addBackend(parseAddress('http://127.0.0.1:9', { id: 'real' }));
    llm.drainBackend('real');
    expect((await llm.generate(req)).backendId).toBe('oracle');
  });

  it('fails with a BackendError when nothing is registered', async () => {
    const llm = new ServiceLlm(new FakePool(), scripted);
    await expect(llm.generate(req)).rejects.toBeInstanceOf(BackendError);
  });

  it('removes the oracle backend from the listing', () => {
    const llm = new ServiceLlm(new FakePool(), scripted);
    llm.addBackend(parseAddress('oracle'));
    expect(llm.removeBackend('oracle')).toBe(true);
    expect(llm.listBackends()).toEqual([]);
  });
});

describe('parseAddress', () => {
  it('reads protocol prefixes', () => {
    expect(parseAddress('sglang+http://10.0.0.1:30000/')).toMatchObject({ url: 'http://10.0.0.1:30000', protocol: 'sglang' });
  });

  it('refuses a non-http address naming the field', () => {
    expect(() => parseAddress('ftp://x')).toThrow(/invalid backend address ftp:\/\/x: unknown scheme/);
  });
});
