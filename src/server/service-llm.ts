import { BackendError } from '../errors.js';
import { systemClock, type Clock } from '../clock.js';
import type { BackendInfo, BackendSpec, GenerateRequest, GenerateResult, LlmClient, ManagedLlmClient } from '../llm/llm-client.js';

import { ORACLE_ADDRESS, ORACLE_URL } from '../llm/oracle-backend.js';

/**
 * The service's LLM client: the backend pool, plus the in-process scripted policy as one more
 * backend when the address `oracle` is registered. Calls go to the pool while it has a backend
 * that is not draining or removed, and to the scripted policy otherwise — so `--backend oracle`
 * alone runs every rollout on the oracle, and adding a real backend takes over new calls.
 * Throws what the pool throws; BackendError when nothing is registered.
 */
export class ServiceLlm implements ManagedLlmClient {
  private scripted: { info: BackendInfo; client: LlmClient } | null = null;

  constructor(
    private readonly pool: ManagedLlmClient,
    private readonly makeScripted: (spec: BackendSpec) => LlmClient,
    private readonly clock: Clock = systemClock,
  ) {}

  addBackend(spec: BackendSpec): BackendInfo {
    if (spec.url !== ORACLE_URL) return this.pool.addBackend(spec);
    if (!this.scripted || this.scripted.info.state === 'removed') {
      this.scripted = {
        client: this.makeScripted(spec),
        info: { id: spec.id ?? ORACLE_ADDRESS, url: ORACLE_URL, protocol: spec.protocol, state: 'healthy', inFlight: 0, served: 0, failures: 0, weightVersion: spec.weightVersion ?? null, latencyMs: null },
      };
    } else this.scripted.info.state = 'healthy';
    return { ...this.scripted.info };
  }

  drainBackend(id: string): boolean {
    if (this.scripted && this.scripted.info.id === id && this.scripted.info.state !== 'removed') {
      this.scripted.info.state = 'draining';
      return true;
    }
    return this.pool.drainBackend(id);
  }

  removeBackend(id: string): boolean {
    if (this.scripted && this.scripted.info.id === id && this.scripted.info.state !== 'removed') {
      this.scripted.info.state = 'removed';
      return true;
    }
    return this.pool.removeBackend(id);
  }

  listBackends(): BackendInfo[] {
    const list = this.pool.listBackends();
    if (this.scripted && this.scripted.info.state !== 'removed') list.push({ ...this.scripted.info });
    return list;
  }

  setWeightVersion(version: string | number, backendId?: string): void {
    if (this.scripted && (backendId === undefined || backendId === this.scripted.info.id)) {
      this.scripted.info.weightVersion = version;
      (this.scripted.client as { setWeightVersion?: (v: string | number) => void }).setWeightVersion?.(version);
    }
    if (backendId === undefined || backendId !== this.scripted?.info.id) this.pool.setWeightVersion(version, backendId);
  }

  async generate(req: GenerateRequest): Promise<GenerateResult> {
    const s = this.scripted;
    const pooled = this.pool.listBackends();
    if (pooled.some((b) => b.state !== 'draining' && b.state !== 'removed')) return this.pool.generate(req);
    if (!s || s.info.state !== 'healthy') {
      // Let the pool give its own answer (every backend draining) when it has any backend at all.
      if (pooled.length > 0) return this.pool.generate(req);
      throw new BackendError('no LLM backend is registered (POST /add_llm_server or --backend)', { code: 'NO_BACKEND', stage: 'run' });
    }
    s.info.inFlight++;
    const t0 = this.clock.now();
    try {
      const r = await s.client.generate(req);
      s.info.served++;
      return { ...r, backendId: s.info.id, weightVersion: s.info.weightVersion };
    } catch (err) {
      s.info.failures++;
      throw err;
    } finally {
      s.info.inFlight--;
      const ms = this.clock.now() - t0;
      s.info.latencyMs = s.info.latencyMs === null ? ms : s.info.latencyMs * 0.9 + ms * 0.1;
    }
  }

  async close(): Promise<void> {
    await Promise.all([this.pool.close?.(), this.scripted?.client.close?.()]);
  }
}
