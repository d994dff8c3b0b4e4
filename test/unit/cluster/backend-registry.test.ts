import { describe, expect, it } from 'vitest';
import { applyRegistry } from '../../../src/cluster/backend-registry.js';
import { finalState } from '../../../src/cluster/cluster-store.js';
import type { ClusterBackend } from '../../../src/protocol/cluster.js';
import type { BackendControl } from '../../../src/server/service-runtime.js';

function recorder(): BackendControl & { log: string[] } {
  const log: string[] = [];
  return {
    log,
    addBackend: (spec) => {
      log.push(`add ${spec.id} ${spec.url} v=${spec.weightVersion ?? null}`);
      return { id: spec.id!, url: spec.url, protocol: spec.protocol, state: 'healthy', inFlight: 0, served: 0, failures: 0, weightVersion: spec.weightVersion ?? null, latencyMs: null };
    },
    drainBackend: (id) => (log.push(`drain ${id}`), true),
    removeBackend: (id) => (log.push(`remove ${id}`), true),
    listBackends: () => [],
    setWeightVersion: (v, id) => void log.push(`version ${v} ${id}`),
  };
}

const b = (id: string, extra: Partial<ClusterBackend> = {}): ClusterBackend => ({ id, url: `http://${id}`, protocol: 'prorl', weightVersion: null, state: 'active', ...extra });

describe('applyRegistry', () => {
  it('adds what is new, removes what is gone, and does nothing for what did not change', () => {
    const rt = recorder();
    const applied = new Map<string, ClusterBackend>();
    applyRegistry(rt, new Map([['a', b('a')], ['b', b('b')]]), applied);
    applyRegistry(rt, new Map([['b', b('b')], ['c', b('c')]]), applied);
    expect(rt.log).toEqual(['add a http://a v=null', 'add b http://b v=null', 'remove a', 'add c http://c v=null']);
    expect([...applied.keys()].sort()).toEqual(['b', 'c']);
  });

  it('drains a backend marked draining and re-adds it when it becomes active again', () => {
    const rt = recorder();
    const applied = new Map<string, ClusterBackend>();
    applyRegistry(rt, new Map([['a', b('a')]]), applied);
    applyRegistry(rt, new Map([['a', b('a', { state: 'draining' })]]), applied);
    applyRegistry(rt, new Map([['a', b('a')]]), applied);
    expect(rt.log).toEqual(['add a http://a v=null', 'drain a', 'remove a', 'add a http://a v=null']);
  });

  it('replaces a backend whose URL changed under the same id, and passes a new weight version on', () => {
    const rt = recorder();
    const applied = new Map<string, ClusterBackend>();
    applyRegistry(rt, new Map([['a', b('a')]]), applied);
    applyRegistry(rt, new Map([['a', b('a', { url: 'http://elsewhere' })]]), applied);
    applyRegistry(rt, new Map([['a', b('a', { url: 'http://elsewhere', weightVersion: 3 })]]), applied);
    expect(rt.log).toEqual(['add a http://a v=null', 'remove a', 'add a http://elsewhere v=null', 'version 3 a']);
  });
});

describe('finalState', () => {
  it.each([
    ['completed', 'done'],
    ['truncated', 'done'],
    ['timed-out', 'timedOut'],
    ['cancelled', 'cancelled'],
    ['infra-error', 'failed'],
    ['task-error', 'failed'],
  ] as const)('maps the outcome %s to the state %s', (outcome, state) => {
    expect(finalState(outcome)).toBe(state);
  });
});
