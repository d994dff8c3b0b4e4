import { afterEach, describe, expect, it } from 'vitest';
import { get, startHarness, type Harness } from '../harness.js';

// Polar's routes in /v1/openapi.json: documented with their bodies, answers, query parameters
// and the token they want (they check it themselves, so the router sees them as open).
let h: Harness | null = null;
afterEach(async () => {
  await h?.close();
  h = null;
});

describe("Polar's routes in /v1/openapi.json", () => {
  it('documents the trainer API: TaskRequest in, TaskStatus out, query parameters, and which routes want the token', async () => {
    h = await startHarness();
    const doc = (await get(`${h.url}/v1/openapi.json`)).body;
    for (const p of ['/rollout/task/submit', '/rollout/task/{id}', '/rollout/status', '/health', '/nodes', '/tasks', '/tasks/{id}/sessions', '/events', '/admin/inference/pause', '/rollout/admin/inference/resume']) {
      expect(doc.paths[p], p).toBeDefined();
      for (const op of Object.values(doc.paths[p]) as { summary: string }[]) expect(op.summary, p).toMatch(/^Polar: /);
    }
    const submit = doc.paths['/rollout/task/submit'].post;
    const body = submit.requestBody.content['application/json'].schema;
    expect(body.required).toEqual(expect.arrayContaining(['task_id', 'instruction', 'agent']));
    expect(body.properties.dispatch_priority).toMatchObject({ minimum: 0, maximum: 100 });
    expect(submit.responses['200'].content['application/json'].schema.properties.status.enum).toEqual(['running']);
    const status = doc.paths['/rollout/task/{id}'].get.responses['200'].content['application/json'].schema;
    expect(Object.keys(status.properties).sort()).toEqual(['completed_sessions', 'result_paths', 'results', 'status', 'task_id', 'total_sessions']);
    const trace = status.properties.results.items.properties.trajectory.properties.traces.items;
    expect(trace.required).toEqual(expect.arrayContaining(['prompt_ids', 'response_ids', 'loss_mask', 'response_logprobs', 'reward']));
    expect(doc.paths['/rollout/task/{id}'].delete.parameters.map((p: { name: string; in: string }) => `${p.in}:${p.name}`)).toEqual(['path:id', 'query:register_if_missing']);
    expect(doc.paths['/tasks'].get.parameters.map((p: { name: string }) => p.name)).toEqual(['status', 'harness', 'since', 'limit']);
    expect(doc.paths['/admin/inference/pause'].post.parameters.map((p: { name: string }) => p.name)).toEqual(['timeout_seconds']);
    // /health is open; the rest want the token as Bearer or as Polar's own header.
    expect(doc.paths['/health'].get.security).toEqual([]);
    expect(doc.paths['/rollout/task/submit'].post.security).toEqual([{ bearer: [] }, { polarToken: [] }]);
    expect(doc.components.securitySchemes.polarToken).toEqual({ type: 'apiKey', in: 'header', name: 'X-Polar-Control-Token' });
  });
});
