import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { WebSocket } from 'ws';

export const ROOT = resolve(import.meta.dirname, '../../..');
export const SHELL_TASKS = join(ROOT, 'examples/shell.jsonl');

/** Instances of examples/shell.jsonl (they carry oracle turns). */
export function shellInstances(): Record<string, unknown>[] {
  return readFileSync(SHELL_TASKS, 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** A `rollout serve` child process. */
export interface Served {
  url: string;
  child: ChildProcess;
  stateDir: string;
  stderr(): string;
  /** SIGTERM, wait for exit; answers the exit code. Removes the state dir. */
  stop(): Promise<number | null>;
}

/** Starts `rollout serve --port 0` with `args`; resolves at `listening on` (up to 60 s: tsx compiles the sources at start, slow on a loaded machine). */
export async function serve(args: string[], env: Record<string, string> = {}): Promise<Served> {
  const stateDir = mkdtempSync(join(tmpdir(), 'rollout-e2e-serve-'));
  const child = spawn(process.execPath, [join(ROOT, 'bin/rollout.js'), 'serve', '--port', '0', '--state-dir', stateDir, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stderr!.on('data', (d) => (err += d));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const url = await new Promise<string>((res, rej) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      rej(new Error(`serve did not start: ${err}`));
    }, 60_000);
    child.stdout!.on('data', (d) => {
      out += d;
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        res(m[1]!);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      rej(new Error(`serve exited ${code}: ${err}`));
    });
  }).catch((e: unknown) => {
    // A serve that never listened leaves no stop() to the caller: its state dir goes here.
    rmSync(stateDir, { recursive: true, force: true });
    throw e;
  });
  return {
    url,
    child,
    stateDir,
    stderr: () => err,
    async stop() {
      if (child.exitCode === null) child.kill('SIGTERM');
      const code = await exited;
      rmSync(stateDir, { recursive: true, force: true });
      return code;
    },
  };
}

/** Every live descendant pid of `pid`, with its command name (from /proc). */
export function descendants(pid: number): { pid: number; comm: string }[] {
  const children = new Map<number, number[]>();
  const comm = new Map<number, string>();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const close = stat.lastIndexOf(')');
      const fields = stat.slice(close + 2).split(' ');
      if (fields[0] === 'Z') continue;
      const ppid = Number(fields[1]);
      comm.set(Number(d), stat.slice(stat.indexOf('(') + 1, close));
      (children.get(ppid) ?? children.set(ppid, []).get(ppid)!).push(Number(d));
    } catch {
      // exited while we looked
    }
  }
  const out: { pid: number; comm: string }[] = [];
  const stack = [...(children.get(pid) ?? [])];
  while (stack.length) {
    const p = stack.pop()!;
    out.push({ pid: p, comm: comm.get(p) ?? '?' });
    stack.push(...(children.get(p) ?? []));
  }
  return out;
}

export async function api(url: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(url + path, {
    method,
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

/** A WebSocket firehose subscriber collecting events. */
export async function watch(url: string): Promise<{ events: any[]; close(): void; results(): Map<string, any> }> {
  const ws = new WebSocket(url.replace('http', 'ws') + '/v1/events');
  const events: any[] = [];
  ws.on('message', (d) => {
    const m = JSON.parse(d.toString());
    if (m.type === 'event') events.push(m.event);
    if (m.type === 'hello' && m.epoch >= 1) ws.send(JSON.stringify({ type: 'subscribe', after: m.seq }));
  });
  await new Promise<void>((r, j) => {
    ws.once('open', () => r());
    ws.once('error', j);
  });
  return {
    events,
    close: () => ws.terminate(),
    results: () => new Map(events.filter((e) => e.type === 'rollout.result').map((e) => [e.rolloutId, e])),
  };
}

/** Polls `cond` every 20 ms until true or `ms` (a generous ceiling, not a timing assertion). */
export async function until(cond: () => boolean | Promise<boolean>, ms = 25_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    // The poll step of this wait-until, not a synchronising sleep.
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A `rollout fake-llm` child process; resolves at `listening on`. */
export async function fakeLlmProcess(args: string[]): Promise<{ url: string; child: ChildProcess; kill(): Promise<void> }> {
  const child = spawn(process.execPath, [join(ROOT, 'bin/rollout.js'), 'fake-llm', '--port', '0', ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stderr!.on('data', (d) => (err += d));
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const url = await new Promise<string>((res, rej) => {
    child.stdout!.on('data', (d) => {
      out += d;
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) res(m[1]!);
    });
    child.once('exit', (code) => rej(new Error(`fake-llm exited ${code}: ${err}`)));
  });
  return {
    url,
    child,
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}
