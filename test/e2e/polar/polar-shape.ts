import { expect } from 'vitest';

// Field names and types of Polar's pydantic models (NVIDIA-NeMo/ProRL-Agent-Server:
// rollout/models.py 063c948, trajectory/models.py 467f2ab), as a client validating our answers
// with them would see them. `reward_components` is the one field beyond Polar's Trace
// (pydantic ignores it).
const isInt = (x: unknown): boolean => Number.isInteger(x);
const isNum = (x: unknown): boolean => typeof x === 'number' && Number.isFinite(x);
const isStr = (x: unknown): boolean => typeof x === 'string';
const isObj = (x: unknown): boolean => !!x && typeof x === 'object' && !Array.isArray(x);
const orNull = (f: (x: unknown) => boolean) => (x: unknown): boolean => x === null || f(x);
const listOf = (f: (x: unknown) => boolean) => (x: unknown): boolean => Array.isArray(x) && x.every(f);

function fields(v: any, spec: Record<string, (x: unknown) => boolean>, where: string): void {
  expect(isObj(v), `${where} is an object`).toBe(true);
  for (const [k, f] of Object.entries(spec)) expect(f(v[k]), `${where}.${k} = ${JSON.stringify(v[k])?.slice(0, 200)}`).toBe(true);
}

const TIMING = ['register_to_init_queue_ms', 'init_ms', 'ready_queue_ms', 'run_ms', 'postrun_ms', 'container_start_ms', 'agent_exec_ms', 'build_ms', 'eval_ms', 'e2e_ms'];
const SESSION_STATUS = ['REGISTERED', 'INITIALIZING', 'READY', 'RUNNING', 'POST_RUN', 'BUILDING', 'EVALUATING', 'COMPLETED', 'ERROR', 'TIMEOUT'];

/** Asserts `st` is a `TaskStatus` (or `TaskResult`) with Polar's field names and types, all the way down. */
export function expectPolarShape(st: any): void {
  fields(st, { task_id: isStr, status: (x) => ['running', 'cancelling', 'cancelled', 'completed', 'failed'].includes(x as string), total_sessions: isInt, completed_sessions: isInt, results: Array.isArray, result_paths: listOf(isStr) }, 'TaskStatus');
  st.results.forEach((s: any, i: number) => {
    const w = `results[${i}]`;
    fields(s, { session_id: isStr, task_id: isStr, status: (x) => SESSION_STATUS.includes(x as string), trajectory: isObj, timing: isObj, node_id: orNull(isStr), error: orNull(isStr), metadata: isObj }, w);
    for (const k of TIMING) expect(isNum(s.timing[k]) && s.timing[k] >= 0, `${w}.timing.${k}`).toBe(true);
    fields(s.trajectory, { status: (x) => ['COMPLETED', 'TIMEOUT', 'ERROR'].includes(x as string), metadata: isObj, traces: Array.isArray, error: orNull(isStr) }, `${w}.trajectory`);
    s.trajectory.traces.forEach((t: any, j: number) => {
      const tw = `${w}.trajectory.traces[${j}]`;
      fields(t, {
        prompt_ids: listOf(isInt),
        response_ids: listOf(isInt),
        loss_mask: listOf((x) => x === 0 || x === 1),
        prompt_messages: listOf(isObj),
        response_messages: listOf(isObj),
        tools: orNull(listOf(isObj)),
        finish_reason: orNull(isStr),
        response_logprobs: orNull(listOf(isNum)),
        reward: orNull(isNum),
        reward_components: isObj,
        metadata: isObj,
      }, tw);
      expect(t.loss_mask.length, `${tw}: loss_mask as long as response_ids`).toBe(t.response_ids.length);
      if (t.response_logprobs !== null) expect(t.response_logprobs.length, `${tw}: response_logprobs as long as response_ids`).toBe(t.response_ids.length);
    });
  });
}
