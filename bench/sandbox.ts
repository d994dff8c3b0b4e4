/**
 * Sandbox benchmark: the whole tool-call path against the floors measured in the same run.
 *
 * - action_p50_ms / action_p99_ms: `echo hi` through runtime → socket → host → pty → back;
 * - raw_pty_p50_ms: the same command to a persistent bash in a pty in this process (the floor),
 *   alternated command by command with the action so both see the same load;
 * - spawn_per_command_p50_ms: `bash -c 'echo hi'` started per command inside bwrap;
 * - hardened_pty_p50_ms / hardened_over_plain_pty: `echo hi` to a bash in bwrap with the
 *   sandbox's unprivileged uid and seccomp filter over the same without them (interleaved);
 * - sandbox_start_p50_ms: create (request to ready) on a warm host, and start_vs_bare_bwrap
 *   over `bwrap ... true` with the same arguments;
 * - concurrent_64_actions_per_s: 64 sandboxes each running 100 commands at once;
 * - host_roundtrip_p50_ms: a workspace file read (runtime → host → runtime, no pty);
 * - host_start_ms_bin / host_start_ms_tsx_import: how long `rollout sandbox-host` takes to
 *   be ready when started through bin/rollout.js vs `node --import tsx src/cli/main.ts`.
 *
 * Run: npx tsx bench/sandbox.ts (`BENCH_ACTION_ONLY=1`: stop after the action figures and
 * host_roundtrip_p50_ms, for A/B runs of the action path on a busy machine).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { spawn } from 'node:child_process';
import * as pty from '@lydell/node-pty';
import { createSandboxProvider } from '../src/sandbox/index.js';
import { buildLaunch, detectDriver, TRUSTED_PATH } from '../src/sandbox/drivers.js';
import { writeSeccompFilter } from '../src/sandbox/seccomp.js';
import { sandboxUidFor } from '../src/sandbox/sandbox-user.js';
import { median, quantile, report, round } from './stats.js';

const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-sandbox-'));
const driver = detectDriver('auto');
console.log(`driver: ${driver.driver} (${driver.reason})`);

/**
 * The floor: a persistent bash in a pty in this process, with no sandbox and no host. Answers a
 * runner that sends one `echo hi` and resolves at the prompt, and the kill.
 */
async function rawPty(): Promise<{ run: () => Promise<void>; kill: () => void }> {
  const term = pty.spawn('bash', ['--noprofile', '--norc', '--noediting', '-i'], { name: 'dumb', cwd: stateDir, env: { PATH: process.env.PATH!, TERM: 'dumb' } });
  let buf = '';
  let waiter: (() => void) | null = null;
  term.onData((d) => {
    buf += d;
    if (buf.includes('#END#') && waiter) waiter();
  });
  const send = (cmd: string): Promise<void> =>
    new Promise((resolve) => {
      buf = '';
      waiter = () => ((waiter = null), resolve());
      term.write(cmd);
    });
  await send("stty -echo; PS1='#END#'\n");
  let killed = false;
  const kill = (): void => {
    if (!killed) term.kill('SIGKILL');
    killed = true;
  };
  return { run: () => send('echo hi\n'), kill };
}

/**
 * The cost of the hardening on the hot path: `echo hi` to a bash in a pty inside bwrap with the
 * sandbox's unprivileged uid and seccomp filter, against the same bwrap without them,
 * interleaved command by command so load hits both alike. Returns p50s in ms.
 */
async function hardenedVsPlainPty(n: number): Promise<{ hardened: number; plain: number }> {
  const shell = async (argv: string[]) => {
    const term = pty.spawn(argv[0]!, argv.slice(1), { name: 'dumb', cwd: stateDir, env: { PATH: process.env.PATH!, TERM: 'dumb' } });
    let buf = '';
    let waiter: (() => void) | null = null;
    term.onData((d) => {
      buf += d;
      if (buf.includes('#END#') && waiter) waiter();
    });
    const run = (cmd: string): Promise<void> =>
      new Promise((resolve) => {
        buf = '';
        waiter = () => ((waiter = null), resolve());
        term.write(cmd);
      });
    await run("stty -echo; PS1='#END#'\n");
    return { run, term };
  };
  const bashArgs = ['bash', '--noprofile', '--norc', '--noediting', '-i'];
  const hard = await shell(bwrapArgv(bashArgs, true));
  const plain = await shell(bwrapArgv(bashArgs, false));
  const ts = { hardened: [] as number[], plain: [] as number[] };
  for (let i = 0; i < 200; i++) {
    await hard.run('echo hi\n');
    await plain.run('echo hi\n');
  }
  for (let i = 0; i < n; i++) {
    for (const [k, s] of [['hardened', hard], ['plain', plain]] as const) {
      const t = performance.now();
      await s.run('echo hi\n');
      ts[k].push(performance.now() - t);
    }
  }
  hard.term.kill('SIGKILL');
  plain.term.kill('SIGKILL');
  return { hardened: median(ts.hardened), plain: median(ts.plain) };
}

function bwrapArgv(command: string[], hardened = true): string[] {
  const ws = path.join(stateDir, 'ws');
  const ctl = path.join(stateDir, 'ctl');
  fs.mkdirSync(ws, { recursive: true });
  fs.mkdirSync(ctl, { recursive: true });
  const uid = sandboxUidFor('bench', { base: 2_000_000_000, count: 1_000_000 });
  if (uid !== null) {
    // What makeSandboxFs does for a real sandbox: the unprivileged uid must reach its workspace.
    fs.chmodSync(stateDir, 0o711);
    fs.chownSync(ws, uid, uid);
  }
  return buildLaunch({
    driver: driver.driver,
    workdir: ws,
    stateDir,
    homeDir: stateDir,
    rootfs: null,
    network: false,
    limits: { maxProcesses: 256, memoryBytes: 4 * 1024 ** 3, fileSizeBytes: 1024 ** 3, cpuSeconds: 3600, totalMemoryBytes: 4 * 1024 ** 3, tmpBytes: 1024 ** 3, workdirBytes: 4 * 1024 ** 3 },
    ctlDir: ctl,
    cgroupProcs: null,
    memoryCgroupProcs: null,
    // The same unprivileged uid, flags and seccomp filter as a real sandbox.
    sandboxUid: hardened ? uid : null,
    seccompFile: hardened ? writeSeccompFilter(ctl) : null,
    resolvConf: null,
    sandboxPath: TRUSTED_PATH,
    command,
  }).argv;
}

async function timeSpawn(argv: string[], n: number): Promise<number[]> {
  const ts: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await new Promise<void>((resolve, reject) => {
      const p = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] });
      p.stdout.resume();
      p.on('error', reject);
      p.on('close', () => resolve());
    });
    ts.push(performance.now() - t);
  }
  return ts;
}

async function hostStart(args: string[], n: number): Promise<number[]> {
  const ts: number[] = [];
  for (let i = 0; i < n; i++) {
    const sock = path.join(stateDir, `hs-${i}.sock`);
    const t = performance.now();
    const p = spawn(process.execPath, [...args, 'sandbox-host', '--socket', sock, '--state-dir', stateDir], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((resolve) => readline.createInterface({ input: p.stdout! }).on('line', (l) => l.startsWith('ready') && resolve()));
    ts.push(performance.now() - t);
    const exited = new Promise((r) => p.once('exit', r));
    p.kill('SIGTERM');
    await exited;
  }
  return ts;
}

const figures: Record<string, number | string> = { driver: driver.driver };

const floor = await rawPty();

const provider = createSandboxProvider({ stateDir, driver: driver.driver });
try {
  const sb = await provider.create({}, { rolloutId: 'bench' });
  for (let i = 0; i < 300; i++) {
    await sb.bash({ command: 'echo hi' });
    await floor.run();
  }
  // The action and its floor alternate command by command, so a change of load on this shared
  // machine hits both alike (measured in phases, the ratio swung from 2.7 to 22 between runs).
  const act: number[] = [];
  const raw: number[] = [];
  for (let i = 0; i < 3000; i++) {
    let t = performance.now();
    await floor.run();
    raw.push(performance.now() - t);
    t = performance.now();
    await sb.bash({ command: 'echo hi' });
    act.push(performance.now() - t);
  }
  floor.kill();
  figures.raw_pty_p50_ms = round(median(raw), 4);
  figures.action_p50_ms = round(median(act), 4);
  figures.action_p99_ms = round(quantile(act, 0.99), 4);
  figures.action_over_raw_pty = round(median(act) / median(raw), 2);
  // The runtime ↔ host hop alone (a file read, no pty): what the whole path adds to the shell.
  await sb.writeFile('x', 'y');
  const reads: number[] = [];
  for (let i = 0; i < 2000; i++) {
    const t = performance.now();
    await sb.readFile('x');
    reads.push(performance.now() - t);
  }
  figures.host_roundtrip_p50_ms = round(median(reads), 4);
  await sb.close();
  if (process.env.BENCH_ACTION_ONLY) {
    await provider.close();
    fs.rmSync(stateDir, { recursive: true, force: true });
    report('sandbox', figures);
    process.exit(0);
  }

  const spawnTimes = await timeSpawn(bwrapArgv(['bash', '-c', 'echo hi']), 60);
  figures.spawn_per_command_p50_ms = round(median(spawnTimes), 3);
  figures.spawn_over_action = round(median(spawnTimes) / median(act), 1);

  if (driver.driver === 'bwrap') {
    const ab = await hardenedVsPlainPty(3000);
    figures.hardened_pty_p50_ms = round(ab.hardened, 4);
    figures.hardened_over_plain_pty = round(ab.hardened / ab.plain, 3);
  }

  const bare = await timeSpawn(bwrapArgv(['true']), 40);
  figures.bare_bwrap_p50_ms = round(median(bare), 3);
  const starts: number[] = [];
  for (let i = 0; i < 30; i++) {
    const t = performance.now();
    const s = await provider.create({}, { rolloutId: `start-${i}` });
    starts.push(performance.now() - t);
    await s.close();
  }
  figures.sandbox_start_p50_ms = round(median(starts), 3);
  figures.start_vs_bare_bwrap = round(median(starts) / median(bare), 2);

  const t0 = performance.now();
  const many = await Promise.all(Array.from({ length: 64 }, (_, i) => provider.create({}, { rolloutId: `c-${i}` })));
  figures.start_64_concurrent_ms = round(performance.now() - t0, 1);
  const t1 = performance.now();
  await Promise.all(
    many.map(async (s) => {
      for (let i = 0; i < 100; i++) await s.bash({ command: 'echo hi' });
    }),
  );
  figures.concurrent_64_actions_per_s = Math.round(6400 / ((performance.now() - t1) / 1000));
  const t2 = performance.now();
  await Promise.all(many.map((s) => s.close()));
  figures.close_64_ms = round(performance.now() - t2, 1);
} finally {
  floor.kill();
  await provider.close();
}

const bin = path.resolve(import.meta.dirname, '../bin/rollout.js');
figures.host_start_ms_bin = round(median(await hostStart([bin], 5)), 1);
figures.host_start_ms_tsx_import = round(median(await hostStart(['--import', 'tsx', '-e', `import('${path.resolve(import.meta.dirname, '../src/cli/main.ts')}').then(m => m.main(process.argv.slice(1)))`, '--'], 5)), 1);

fs.rmSync(stateDir, { recursive: true, force: true });
report('sandbox', figures);
