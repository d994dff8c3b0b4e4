import { describe, expect, it } from 'vitest';
import { createActor, fromPromise, waitFor } from 'xstate';
import { sandboxMachine } from '../../../machines/sandbox.machine.js';

function make(start: () => Promise<void> = async () => {}) {
  let closes = 0;
  const actor = createActor(
    sandboxMachine.provide({
      actors: {
        startSandbox: fromPromise(start),
        closeSandbox: fromPromise(async () => {
          closes++;
        }),
      },
    }),
  ).start();
  return { actor, closes: () => closes };
}

describe('sandbox machine', () => {
  it('goes starting → ready when the start succeeds', async () => {
    const { actor } = make();
    expect(actor.getSnapshot().value).toBe('starting');
    await waitFor(actor, (s) => s.value === 'ready');
  });

  it('ends closed with the reason when the start fails', async () => {
    const { actor } = make(async () => {
      throw new Error('no bwrap');
    });
    const s = await waitFor(actor, (s) => s.status === 'done');
    expect(s.value).toBe('closed');
    expect(s.context.reason).toBe('no bwrap');
  });

  it('stays busy until the last overlapping call is done', async () => {
    const { actor } = make();
    await waitFor(actor, (s) => s.value === 'ready');
    actor.send({ type: 'CALL' });
    actor.send({ type: 'CALL' });
    actor.send({ type: 'CALL_DONE' });
    expect(actor.getSnapshot().value).toBe('busy');
    actor.send({ type: 'CALL_DONE' });
    expect(actor.getSnapshot().value).toBe('ready');
  });

  it('moves to lost from busy and then closes through the close actor', async () => {
    const { actor, closes } = make();
    await waitFor(actor, (s) => s.value === 'ready');
    actor.send({ type: 'CALL' });
    actor.send({ type: 'LOST', reason: 'shell died' });
    expect(actor.getSnapshot().value).toBe('lost');
    expect(actor.getSnapshot().context.reason).toBe('shell died');
    actor.send({ type: 'CLOSE' });
    await waitFor(actor, (s) => s.value === 'closed');
    expect(closes()).toBe(1);
  });
});
