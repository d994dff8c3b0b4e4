import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { once } from 'node:events';
import { execFileSync } from 'node:child_process';
import { createSandboxProvider, type HostSandboxProvider } from '../../../src/sandbox/index.js';
import { testDriver } from './helpers.js';
import { haveTools } from '../../helpers/system-tools.js';

// Issue #14 item 4: the examples in examples/harness/ — two stdlib-only Python agents and the
// `harness` tasks that run them — solve every task in a real sandbox when their chat requests
// are answered with the tasks' `oracle` turns in OpenAI's format. The answering server here is
// a stand-in for the rollout's proxy (the proxy itself is tested in test/integration/proxy/);
// the agents reach it only through the sandbox's $OPENAI_BASE_URL.
const driver = testDriver();
const ROOT = path.resolve(__dirname, '../../..');
const TASKS = path.join(ROOT, 'examples/harness/tasks.jsonl');

interface OracleTurn {
  content?: string;
  tool_calls?: { name: string; arguments: Record<string, unknown> }[];
}
interface HarnessTask {
  data_source: string;
  instance_id: string;
  command: string;
  files: Record<string, string>;
  eval_command: string;
  max_llm_calls: number;
  max_tokens_total: number;
  oracle: OracleTurn[];
}
interface ChatMessage {
  role: string;
  content?: string | null;
  tool_calls?: unknown[];
  tool_call_id?: string;
}
interface Seen {
  auth: string | undefined;
  stream: boolean;
  messages: ChatMessage[];
  tools: { type: string; function: { name: string } }[];
}

/** Replays one task's oracle turns as OpenAI chat completions (JSON or SSE), recording each request. */
class OracleStandIn {
  readonly dir = fs.mkdtempSync(path.join(os.tmpdir(), 'llmproxy-ex-'));
  readonly socketPath = path.join(this.dir, 'llm.sock');
  readonly server = http.createServer((req, res) => void this.handle(req, res).catch(() => res.destroy()));
  readonly seen: Seen[] = [];

  constructor(private readonly oracle: OracleTurn[]) {}

  async listen(): Promise<void> {
    this.server.listen(this.socketPath);
    await once(this.server, 'listening');
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = JSON.parse(Buffer.concat(chunks).toString()) as { messages: ChatMessage[]; tools: Seen['tools']; stream?: boolean };
    const n = this.seen.length;
    this.seen.push({ auth: req.headers.authorization, stream: body.stream === true, messages: body.messages, tools: body.tools });
    const turn = this.oracle[n] ?? { content: 'Done.' };
    const calls = (turn.tool_calls ?? []).map((c, i) => ({ id: `call_${n}_${i}`, type: 'function', function: { name: c.name, arguments: JSON.stringify(c.arguments) } }));
    const finish = calls.length ? 'tool_calls' : 'stop';
    if (!body.stream) {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ id: `chatcmpl-${n}`, object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: turn.content ?? null, ...(calls.length ? { tool_calls: calls } : {}) }, finish_reason: finish }] }));
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const chunk = (delta: object, finishReason: string | null = null): void => {
      res.write(`data: ${JSON.stringify({ id: `chatcmpl-${n}`, object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finishReason }] })}\n\n`);
    };
    chunk({ role: 'assistant' });
    if (turn.content) for (const piece of turn.content.match(/.{1,4}/gs) ?? []) chunk({ content: piece });
    calls.forEach((c, index) => {
      // The arguments arrive in pieces, as from a real server.
      chunk({ tool_calls: [{ index, id: c.id, type: 'function', function: { name: c.function.name, arguments: '' } }] });
      for (const piece of c.function.arguments.match(/.{1,7}/gs) ?? []) chunk({ tool_calls: [{ index, function: { arguments: piece } }] });
    });
    chunk({}, finish);
    res.end('data: [DONE]\n\n');
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((r) => this.server.close(r));
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

const tasks = fs
  .readFileSync(TASKS, 'utf8')
  .split('\n')
  .filter(Boolean)
  .map((l) => JSON.parse(l) as HarnessTask);

/** True when `prev` (plus one assistant turn and its tool answers) is a prefix of `next`. */
function extendsHistory(prev: ChatMessage[], next: ChatMessage[]): boolean {
  return next.length > prev.length && JSON.stringify(next.slice(0, prev.length)) === JSON.stringify(prev);
}

describe('examples/harness/tasks.jsonl', () => {
  it.skipIf(!haveTools('python3'))('is generated from the agents as they are (make_tasks.py --check)', () => {
    execFileSync('python3', [path.join(ROOT, 'examples/harness/make_tasks.py'), '--check'], { stdio: 'pipe' });
    expect(tasks.length).toBeGreaterThanOrEqual(4);
    for (const t of tasks) {
      expect(t.data_source).toBe('harness');
      expect(t.files[t.command.split(' ')[1]!]).toBeDefined();
      expect(t.oracle.at(-1)!.tool_calls).toBeUndefined();
    }
    expect(tasks.some((t) => t.command.includes('rewriting_agent.py'))).toBe(true);
    expect(tasks.some((t) => t.command.includes('--stream'))).toBe(true);
  });
});

describe.runIf(driver !== 'none')(`the harness example agents in a ${driver} sandbox`, () => {
  let stateDir: string;
  let provider: HostSandboxProvider;

  beforeAll(() => {
    stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sbx-llmproxy-ex-'));
    provider = createSandboxProvider({ driver, hosts: 1, stateDir, timeouts: { bashMs: 60_000, noOutputMs: 60_000 } });
  });
  afterAll(async () => {
    await provider?.close();
    if (stateDir) fs.rmSync(stateDir, { recursive: true, force: true });
  });

  it.each(tasks.map((t) => [t.instance_id, t] as const))('%s: the agent solves the task with the oracle turns', async (_id, task) => {
    const proxy = new OracleStandIn(task.oracle);
    await proxy.listen();
    const token = `rk-${task.instance_id}`;
    const sb = await provider.create({ files: task.files, llmProxy: { socketPath: proxy.socketPath, token } }, { rolloutId: task.instance_id });
    try {
      const run = await sb.bash({ command: task.command, timeoutMs: 60_000 });
      expect(run.exitCode, run.output).toBe(0);
      const ev = await sb.bash({ command: task.eval_command });
      expect(ev.exitCode, `${run.output}\n---\n${ev.output}`).toBe(0);

      // One request per oracle turn; the last answer (no tool call) ended the agent.
      expect(proxy.seen).toHaveLength(task.oracle.length);
      const streaming = task.command.includes('--stream');
      for (const s of proxy.seen) {
        expect(s.auth).toBe(`Bearer ${token}`);
        expect(s.stream).toBe(streaming);
        expect(s.tools.map((t) => [t.type, t.function.name])).toEqual([['function', 'bash']]);
      }
      // Every tool call got a `role: tool` answer carrying its id.
      const last = proxy.seen.at(-1)!.messages;
      for (const m of last.filter((x) => x.role === 'tool')) expect(m.tool_call_id).toMatch(/^call_\d+_0$/);

      const rewriting = task.command.includes('rewriting_agent.py');
      const extended = proxy.seen.slice(1).map((s, i) => extendsHistory(proxy.seen[i]!.messages, s.messages));
      if (!rewriting) expect(extended.every(Boolean)).toBe(true);
      else {
        // Request 4 follows 3 turns: the history was rewritten (summary in the task message).
        expect(extended[2]).toBe(false);
        expect(proxy.seen[3]!.messages.map((m) => m.role)).toEqual(['system', 'user']);
        expect(proxy.seen[3]!.messages[1]!.content).toContain('Progress so far:\n- ran: ');
        expect(extended.filter((e, i) => i !== 2).every(Boolean)).toBe(true);
      }
    } finally {
      await sb.close();
      await proxy.close();
    }
  });
});

describe('rollout run examples/harness/tasks.jsonl', () => {
  // The README's command for the examples: the CLI, the oracle backend answering the agents'
  // proxied calls, real sandboxes. Every task is resolved; the agent that only extends its
  // history gives one token-exact sequence, the rewriting one an explicit list of segments.
  it('resolves every task; simple_agent token-exact, rewriting_agent segmented', async () => {
    const out = fs.mkdtempSync(path.join(os.tmpdir(), 'harness-run-'));
    try {
      execFileSync(process.execPath, [path.join(ROOT, 'bin', 'rollout.js'), 'run', TASKS, '--out', out], { cwd: out, timeout: 180_000, stdio: 'pipe', env: { ...process.env, NO_COLOR: '1' } });
      const rows = fs.readFileSync(path.join(out, 'trajectories.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as {
        instanceId: string;
        outcome: string;
        resolved: boolean;
        trajectory: { segments?: unknown[]; diagnostics: { continuity: string } };
      });
      const tasks = fs.readFileSync(TASKS, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as HarnessTask);
      expect(rows.map((r) => r.instanceId).sort()).toEqual(tasks.map((t) => t.instance_id).sort());
      for (const r of rows) {
        const task = tasks.find((t) => t.instance_id === r.instanceId)!;
        expect([r.instanceId, r.outcome, r.resolved]).toEqual([r.instanceId, 'completed', true]);
        if (task.command.includes('rewriting_agent.py')) {
          expect(r.trajectory.diagnostics.continuity).toBe('segmented');
          expect(r.trajectory.segments!.length).toBeGreaterThanOrEqual(2);
        } else {
          expect(r.trajectory.diagnostics.continuity).toBe('token-exact');
          expect(r.trajectory.segments).toBeUndefined();
        }
      }
    } finally {
      fs.rmSync(out, { recursive: true, force: true });
    }
  }, 200_000);
});
