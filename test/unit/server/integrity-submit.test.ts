import { afterEach, describe, expect, it } from 'vitest';
import { post, startHarness, task, type Harness } from './harness.js';

let h: Harness;
afterEach(async () => {
  await h?.close();
});

describe('a bad integrity policy is refused at submit, naming the field', () => {
  it('answers 400 on /v1/rollouts for a glob that escapes the workspace, admitting nothing', async () => {
    h = await startHarness();
    const r = await post(`${h.url}/v1/rollouts`, { instance: task({ integrity: { protect: ['tests/**', '../../etc/shadow'] } }) });
    expect(r.status).toBe(400);
    expect(r.body.error.issues.map((i: { path: string }) => i.path)).toEqual(['instance.integrity.protect.1']);
    expect(h.rt().list()).toEqual([]);
  });

  it('answers 422 on ProRL /process for a protect list of 10,000 globs', async () => {
    h = await startHarness();
    const r = await post(`${h.url}/process`, { instance: task({ integrity: { protect: Array.from({ length: 10_000 }, (_, i) => `t${i}.py`) } }) });
    // ProRL's FastAPI answers a bad body 422 with `detail[].loc`.
    expect(r.status).toBe(422);
    expect(JSON.stringify(r.body)).toContain('integrity');
    expect(JSON.stringify(r.body)).toContain('at most 1000 globs');
    expect(h.rt().list()).toEqual([]);
  });

  it('runs a rollout with a good policy in a sandbox without a monitor, degraded and saying so', async () => {
    h = await startHarness();
    const r = await post(`${h.url}/process`, { instance: task({ integrity: { protect: ['tests/**'], on_violation: 'zero' } }) });
    expect(r.status).toBe(200);
    expect(r.body.metadata.integrity).toMatchObject({ violations: [], action: 'zero', mode: 'degraded', reason: 'this sandbox has no integrity monitor' });
  });
});
