import { describe, expect, it } from 'vitest';
import { createActor, fromCallback } from 'xstate';
import { backendMachine, type BackendMachineEvent } from '../../../machines/backend.machine.js';

function start(threshold = 2) {
  const entered: string[] = [];
  const probes: { immediate: boolean }[] = [];
  const actor = createActor(
    backendMachine.provide({
      actors: { prober: fromCallback<BackendMachineEvent, { backendId: string; immediate: boolean }>(({ input }) => void probes.push({ immediate: input.immediate })) },
      actions: { stateEntered: (_, p) => void entered.push(p.state) },
    }),
    { input: { backendId: 'b', failureThreshold: threshold } },
  ).start();
  return { actor, entered, probes };
}

describe('backendMachine', () => {
  it('starts probing and asks its prober to probe at once', () => {
    const { actor, probes } = start();
    expect(actor.getSnapshot().value).toBe('probing');
    expect(probes).toEqual([{ immediate: true }]);
  });

  it('becomes healthy on the first passing probe and probes again only after a period', () => {
    const { actor, probes } = start();
    actor.send({ type: 'PROBE_OK' });
    expect(actor.getSnapshot().value).toBe('healthy');
    expect(probes.at(-1)).toEqual({ immediate: false });
  });

  it('becomes healthy when a call succeeds before the first probe answers', () => {
    const { actor } = start();
    actor.send({ type: 'CALL_OK' });
    expect(actor.getSnapshot().value).toBe('healthy');
  });

  it('degrades after failureThreshold consecutive failures, calls and probes counted together', () => {
    const { actor } = start(3);
    actor.send({ type: 'PROBE_OK' });
    actor.send({ type: 'CALL_FAIL' });
    actor.send({ type: 'PROBE_FAIL' });
    expect(actor.getSnapshot().value).toBe('healthy');
    actor.send({ type: 'CALL_FAIL' });
    expect(actor.getSnapshot().value).toBe('degraded');
  });

  it('marks a backend dead from the start degraded (down) after failureThreshold failures, never probing forever (#16.3)', () => {
    const { actor, entered } = start(2);
    actor.send({ type: 'PROBE_FAIL' });
    expect(actor.getSnapshot().value).toBe('probing');
    actor.send({ type: 'CALL_FAIL' });
    expect(actor.getSnapshot().value).toBe('degraded');
    actor.send({ type: 'PROBE_OK' });
    expect(entered).toEqual(['probing', 'degraded', 'healthy']);
  });

  it('forgets earlier failures after a success', () => {
    const { actor } = start(2);
    actor.send({ type: 'PROBE_OK' });
    actor.send({ type: 'CALL_FAIL' });
    actor.send({ type: 'CALL_OK' });
    actor.send({ type: 'CALL_FAIL' });
    expect(actor.getSnapshot().value).toBe('healthy');
  });

  it('re-admits a degraded backend when a probe passes', () => {
    const { actor, entered } = start(1);
    actor.send({ type: 'PROBE_OK' });
    actor.send({ type: 'PROBE_FAIL' });
    actor.send({ type: 'PROBE_OK' });
    expect(entered).toEqual(['probing', 'healthy', 'degraded', 'healthy']);
  });

  it('drains until the pool reports it idle, then is removed for good', () => {
    const { actor } = start();
    actor.send({ type: 'PROBE_OK' });
    actor.send({ type: 'DRAIN' });
    actor.send({ type: 'PROBE_OK' });
    expect(actor.getSnapshot().value).toBe('draining');
    actor.send({ type: 'IDLE' });
    expect(actor.getSnapshot().status).toBe('done');
  });

  it('is removed from any state on REMOVE', () => {
    const { actor } = start();
    actor.send({ type: 'REMOVE' });
    expect(actor.getSnapshot().value).toBe('removed');
  });
});
