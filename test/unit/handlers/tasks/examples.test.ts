import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { builtinHandlers } from '../../../../src/handlers/builtin.js';
import { InstanceSchema, type Instance } from '../../../../src/protocol/instance.js';
import { runWithOracle } from './local-sandbox.js';

/** Example instances whose oracle is wrong on purpose, so a run's summary shows a real mix. */
const EXPECTED_FAILURES = new Set([
  'math-times-wrong',
  'math-no-finish',
  'code-vowels-buggy',
  'code-gave-up',
  'swe-leap-wrong-fix',
  'stem-planet-wrong',
  'shell-logs-wrong',
]);

function handlerFor(ds: string) {
  const h = builtinHandlers.find((x) => x.name === ds || x.aliases?.includes(ds));
  if (!h) throw new Error(`no handler for ${ds}`);
  return h;
}

let root: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'tasks-examples-'));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

for (const file of ['math', 'code', 'swe', 'stem', 'shell']) {
  describe(`examples/${file}.jsonl`, async () => {
    const lines = (await readFile(new URL(`../../../../examples/${file}.jsonl`, import.meta.url), 'utf8')).split('\n').filter(Boolean);
    for (const line of lines) {
      const instance: Instance = InstanceSchema.parse(JSON.parse(line));
      const expected = !EXPECTED_FAILURES.has(instance.instance_id as string);
      it(`scores ${instance.instance_id} as ${expected ? 'resolved' : 'not resolved'} when its oracle is replayed`, async () => {
        const r = await runWithOracle(handlerFor(instance.data_source), instance, root);
        expect({ resolved: r.resolved, reward: r.reward, details: r.details }).toMatchObject({ resolved: expected, reward: expected ? 1 : 0 });
      });
    }
  });
}
