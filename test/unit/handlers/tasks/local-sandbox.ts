import { systemClock } from '../../../../src/clock.js';
import { spawn } from 'node:child_process';
import { cp, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { TaskError } from '../../../../src/errors.js';
import type { AgentHandler, HandlerContext } from '../../../../src/proxy/agent-contract.js';
import type { EvalResult } from '../../../../src/proxy/agent-contract.js';
import type { Instance } from '../../../../src/protocol/instance.js';
import type { Message } from '../../../../src/protocol/messages.js';
import type { BashResult, Sandbox, SandboxSpec } from '../../../../src/sandbox/sandbox.js';

/**
 * A test sandbox that runs real processes (`bash -c` per command, `python3 -c` per cell) in a
 * temp dir, without isolation. The handlers' unit tests use it so they exercise real git, python
 * and test runners without the sandbox host; the integration tests use the real provider.
 */
export async function createLocalSandbox(spec: SandboxSpec, root: string): Promise<Sandbox> {
  const dir = await mkdtemp(join(root, 'sb-'));
  const env = { ...process.env, ...spec.env };
  if (spec.seedDir) await cp(spec.seedDir, dir, { recursive: true });
  for (const [p, c] of Object.entries(spec.files ?? {})) {
    await mkdir(dirname(join(dir, p)), { recursive: true });
    await writeFile(join(dir, p), c);
  }
  const exec = (cmd: string, args: string[], timeoutMs = 30_000): Promise<BashResult> =>
    new Promise((res) => {
      const child = spawn(cmd, args, { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (out += d.toString()));
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      child.on('close', (code) => {
        clearTimeout(timer);
        res({ output: out, exitCode: code, cwd: '/workspace', timedOut: code === null, truncated: false });
      });
    });
  for (const s of spec.setup ?? []) {
    const r = await exec('bash', ['-c', s]);
    if (r.exitCode !== 0) throw new TaskError(`setup failed: ${s}: ${r.output}`);
  }
  return {
    id: dir,
    // Input to a running command has no meaning here: every command runs to its end.
    bash: async (req) => (req.isInput ? { output: '', exitCode: 0, cwd: '/workspace', timedOut: false, truncated: false } : exec('bash', ['-c', req.command], req.timeoutMs)),
    async python(code) {
      const r = await exec('python3', ['-c', code]);
      return { output: r.output, error: r.exitCode === 0 ? null : r.output, timedOut: r.timedOut };
    },
    async editor(req) {
      const p = join(dir, req.path.replace(/^\/workspace\/?/, ''));
      if (req.command === 'create') {
        await mkdir(dirname(p), { recursive: true });
        await writeFile(p, req.file_text);
        return { output: `File created: ${req.path}`, error: false };
      }
      if (req.command === 'str_replace') {
        const text = await readFile(p, 'utf8');
        const n = text.split(req.old_str).length - 1;
        if (n !== 1) return { output: `old_str found ${n} times`, error: true };
        await writeFile(p, text.replace(req.old_str, req.new_str ?? ''));
        return { output: 'edited', error: false };
      }
      if (req.command === 'view') return { output: await readFile(p, 'utf8'), error: false };
      return { output: `unsupported in the local test sandbox: ${req.command}`, error: true };
    },
    readFile: (p) => readFile(join(dir, p), 'utf8'),
    async writeFile(p, c) {
      await mkdir(dirname(join(dir, p)), { recursive: true });
      await writeFile(join(dir, p), c);
    },
    close: () => rm(dir, { recursive: true, force: true }),
  };
}

/**
 * Drives a handler the way the runtime does, with `instance.oracle` as the policy: init, one
 * `act` per oracle turn until the handler stops, eval. Closes every sandbox it made.
 */
export async function runWithOracle(handler: AgentHandler, instance: Instance, root: string): Promise<EvalResult & { messages: Message[] }> {
  const sandboxes: Sandbox[] = [];
  const ctx: HandlerContext = {
    rolloutId: 'r1',
    instance,
    sampling: {},
    signal: new AbortController().signal,
    clock: systemClock,
    async createSandbox(spec) {
      const sb = await createLocalSandbox(spec, root);
      sandboxes.push(sb);
      return sb;
    },
  };
  try {
    const init = await handler.init(ctx);
    const messages = [...init.messages];
    let state = init.state;
    let finish: 'finish_tool' | 'no_tool_call' | 'max_iterations' = 'max_iterations';
    for (const [turn, o] of (instance.oracle ?? []).entries()) {
      const assistant = { role: 'assistant' as const, content: o.content ?? '', tool_calls: o.tool_calls ?? [] };
      messages.push(assistant);
      const r = await handler.act({ ...ctx, sandbox: init.sandbox, state, turn, assistant, malformed: [] });
      messages.push(...r.messages);
      state = r.state ?? state;
      if (r.stop) {
        finish = r.stop;
        break;
      }
    }
    const res = await handler.eval({ ...ctx, sandbox: init.sandbox, state, messages, finish });
    return { ...res, messages };
  } finally {
    for (const sb of sandboxes) await sb.close();
  }
}
