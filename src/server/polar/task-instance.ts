import { ValidationError } from '../../errors.js';
import { sweGradeOf, SweHarnessInstanceSchema, sweHarnessScript, type SweGrade } from '../../handlers/tasks/swe-harness-eval.js';
import { POLAR_HARNESSES, type PolarHarness, type PrepareAction, type TaskRequest } from './polar-models.js';

/** Host files a task names (`upload_file` / `upload_dir` sources, Harbor's `tests_dir`), read before mapping. */
export interface TaskUploads {
  /** Per prepare step index (`runtime.prepare[i]`): its files, relative path → content (one `''` key for `upload_file`). */
  prepare: Map<number, Map<string, string>>;
  /** Harbor's `tests/` directory: relative path → content. */
  harborTests: Map<string, string> | null;
}

/** What a Polar task becomes: the one instance and sampling parameters all its sessions run. */
export interface MappedTask {
  instance: Record<string, unknown>;
  sampling: Record<string, unknown>;
}

/** Where uploads are staged inside the sandbox's workspace before a setup step copies them into place. */
const STAGE = '.polar-upload';
/** A line the Harbor eval prints so the reward read from the verifier's file reaches the result. */
export const HARBOR_MARK = 'POLAR_HARBOR_REWARD';
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** One shell word: `s` single-quoted. */
export function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

function exportsOf(env: Record<string, string>, field: string): string {
  const parts: string[] = [];
  for (const [k, v] of Object.entries(env)) {
    if (!ENV_NAME.test(k)) throw new ValidationError('invalid TaskRequest', [{ path: `${field}.${k.slice(0, 100)}`, message: 'must be a shell variable name ([A-Za-z_][A-Za-z0-9_]*)' }]);
    parts.push(`export ${k}=${shellQuote(v)}`);
  }
  return parts.length ? `${parts.join('; ')}; ` : '';
}

/**
 * Maps a Polar `TaskRequest` onto a `harness` instance (a pure function; the host files it names
 * were read into `uploads`):
 * - `agent.harness` `shell`: `command` is `custom_shell.command` with `{{INSTRUCTION}}` replaced by
 *   the instruction as one single-quoted shell word, run in `custom_shell.cwd` (else
 *   `runtime.workdir`) with `runtime.env`, `agent.env` and `custom_shell.env` exported;
 *   a preset (`codex`, `claude_code`, …): `preset` (the harness family's name for it) and
 *   `instruction`, with `env` and `model`;
 * - `image` (what `runtime.image` became, task-image.ts: an image-store name, or null for the
 *   sandbox's default root) → the instance's `image`, which the sessions' sandbox and eval run in;
 *   `runtime.prepare` → `setup` steps in order (uploads are staged in the workspace and copied
 *   to their target; `exec` retried up to `max_attempts`);
 * - `evaluator` → `eval_command` (see {@link evalCommand}) and `eval_timeout_s`;
 * - `agent.settings.model_kwargs` (`temperature`, `top_p`, `max_tokens`, `extra_body.top_k`) and
 *   `settings.sampling_seed` → sampling parameters; `settings.max_turns` → `max_llm_calls`;
 *   `settings.oracle` → the instance's `oracle` turns (the scripted policy, for tests and replays).
 * Throws ValidationError naming the field (a 422 at the route) for what cannot run here.
 */
export function toInstance(task: TaskRequest, uploads: TaskUploads, image: string | null = null): MappedTask {
  const agent = task.agent;
  const harness = agent.harness as PolarHarness;
  const runtimeEnv = task.runtime?.env ?? {};
  const workdir = task.runtime?.workdir ?? null;
  const files: Record<string, string> = {};
  const setup: string[] = [];
  (task.runtime?.prepare ?? []).forEach((step, i) => setup.push(prepareStep(step, i, uploads.prepare.get(i), files)));

  const instance: Record<string, unknown> = { data_source: 'harness', instance_id: task.task_id };
  if (image !== null) instance['image'] = image;
  if (harness === 'shell') {
    const shell = agent.custom_shell!;
    const cwd = shell.cwd ?? workdir;
    const command = shell.command.split('{{INSTRUCTION}}').join(shellQuote(task.instruction));
    instance['command'] = `${cwd ? `cd ${shellQuote(cwd)} && ` : ''}${exportsOf(runtimeEnv, 'runtime.env')}${exportsOf(agent.env, 'agent.env')}${exportsOf(shell.env ?? {}, 'agent.custom_shell.env')}${command}`;
  } else {
    exportsOf({ ...runtimeEnv, ...agent.env }, 'agent.env'); // the names are checked here too
    instance['preset'] = POLAR_HARNESSES[harness];
    instance['instruction'] = task.instruction;
    if (Object.keys(runtimeEnv).length + Object.keys(agent.env).length > 0) instance['env'] = { ...runtimeEnv, ...agent.env };
    if (agent.model_name !== null) instance['model'] = agent.model_name;
    if (workdir) instance['cwd'] = workdir;
  }
  const ev = evalCommand(task, uploads.harborTests);
  instance['eval_command'] = ev.command;
  if (ev.timeoutS !== undefined) instance['eval_timeout_s'] = ev.timeoutS;
  if (ev.sweGrade) instance['swebench_grade'] = ev.sweGrade;
  if (Object.keys(files).length > 0) instance['files'] = files;
  if (setup.length > 0) instance['setup'] = setup;

  const settings = agent.settings;
  const maxTurns = settings['max_turns'];
  if (typeof maxTurns === 'number' && Number.isInteger(maxTurns) && maxTurns > 0) instance['max_llm_calls'] = maxTurns;
  if (Array.isArray(settings['oracle'])) instance['oracle'] = settings['oracle'];
  return { instance, sampling: samplingOf(settings) };
}

function prepareStep(step: PrepareAction, i: number, content: Map<string, string> | undefined, files: Record<string, string>): string {
  const field = `runtime.prepare.${i}`;
  if (step.type === 'exec') {
    const body = `${step.cwd ? `cd ${shellQuote(step.cwd)} && ` : ''}${exportsOf(step.env ?? {}, `${field}.env`)}${step.command!}`;
    if (step.max_attempts === 1) return `( ${body} )`;
    // Retried until it exits 0, at most max_attempts times; the last failure fails the step.
    return `polar_i=1; until ( ${body} ); do if [ "$polar_i" -ge ${step.max_attempts} ]; then false; break; fi; polar_i=$((polar_i+1)); done`;
  }
  if (!content) throw new ValidationError('invalid TaskRequest', [{ path: `${field}.source`, message: 'was not read' }]);
  const stage = `${STAGE}/${i}`;
  for (const [rel, text] of content) files[rel === '' ? stage : `${stage}/${rel}`] = text;
  const target = shellQuote(step.target!);
  if (step.type === 'upload_file') return `mkdir -p "$(dirname ${target})" && cp ${shellQuote(stage)} ${target}`;
  return `mkdir -p ${target} && cp -R ${shellQuote(stage)}/. ${target}/`;
}

function samplingOf(settings: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const kw = settings['model_kwargs'];
  if (kw && typeof kw === 'object' && !Array.isArray(kw)) {
    const k = kw as Record<string, unknown>;
    if (k['temperature'] !== undefined) out['temperature'] = k['temperature'];
    if (k['top_p'] !== undefined) out['top_p'] = k['top_p'];
    if (k['max_tokens'] !== undefined) out['max_tokens'] = k['max_tokens'];
    const extra = k['extra_body'];
    if (extra && typeof extra === 'object' && (extra as Record<string, unknown>)['top_k'] !== undefined) out['top_k'] = (extra as Record<string, unknown>)['top_k'];
  }
  if (settings['sampling_seed'] !== undefined) out['seed'] = settings['sampling_seed'];
  return out;
}

/**
 * The evaluator as an `eval_command` run in the session's sandbox after the agent stopped (exit
 * 0 → resolved, reward 1):
 * - none / `session_completed`: `true` (a session that completed is resolved);
 * - `test_on_output`: runs `config.test_command` in `config.repo_dir` (default `/testbed`) and
 *   compares its `PASSED|FAILED|ERROR|SKIPPED <nodeid>` lines, node ids normalised as Polar does,
 *   with `config.expected_output_json`; equal and non-empty → exit 0;
 * - `harbor`: writes the task's `tests/` into `config.tests_target` (default `/tests`) only now,
 *   so the agent never saw them, runs `config.test_command` (default `bash /tests/test.sh`) and
 *   prints the reward the verifier wrote to `config.verifier_dir` (default `/logs/verifier`)
 *   `reward.txt` (else `reward.json`) as a `POLAR_HARBOR_REWARD` line the result reads.
 * - `swebench_harness`: `config.instance` (the SWE-bench / SWE-Gym row) graded on the SWE
 *   family's path (swe-harness-eval.ts): the agent's patch in `config.repo_dir` (default
 *   `/testbed`) applied to the base tree, the row's `test_patch` over it, the tests run, and the
 *   log graded per test by the harness family (`swebench_grade`).
 */
export function evalCommand(task: TaskRequest, harborTests: Map<string, string> | null): { command: string; timeoutS?: number; sweGrade?: SweGrade } {
  const ev = task.evaluator;
  const env = exportsOf(ev?.env ?? {}, 'evaluator.env');
  const cfg = ev?.config ?? {};
  const str = (key: string, dflt: string): string => {
    const v = cfg[key];
    if (v === undefined || v === null) return dflt;
    if (typeof v !== 'string' || v.trim() === '') throw new ValidationError('invalid TaskRequest', [{ path: `evaluator.config.${key}`, message: 'must be a non-empty string' }]);
    return v.trim();
  };
  const seconds = (key: string, dflt: number): number => {
    const v = cfg[key] ?? dflt;
    if (typeof v !== 'number' || !(v > 0)) throw new ValidationError('invalid TaskRequest', [{ path: `evaluator.config.${key}`, message: 'must be a positive number' }]);
    return Math.min(v, 3600);
  };
  switch (ev?.strategy ?? 'session_completed') {
    case 'session_completed':
      return { command: 'true' };
    case 'test_on_output': {
      const test = str('test_command', '');
      const expected = expectedTests(cfg['expected_output_json']);
      const repo = str('repo_dir', '/testbed');
      const want = Buffer.from([...expected].map(([k, v]) => `${k}\t${v}\n`).join('')).toString('base64');
      const script = [
        'polar_d=$(mktemp -d)',
        `( cd ${shellQuote(repo)} && ${env}${test} ) > "$polar_d/out" 2>&1`,
        `awk ${shellQuote(PARSE_AWK)} "$polar_d/out" | LC_ALL=C sort > "$polar_d/got"`,
        `printf '%s' ${shellQuote(want)} | base64 -d > "$polar_d/want"`,
        'cat "$polar_d/got"',
        '[ -s "$polar_d/got" ] && [ "$(cat "$polar_d/got")" = "$(cat "$polar_d/want")" ]; polar_rc=$?; rm -rf "$polar_d"; [ "$polar_rc" -eq 0 ]',
      ].join('\n');
      return { command: script, timeoutS: seconds('test_timeout', 1200) };
    }
    case 'harbor': {
      if (!harborTests) throw new ValidationError('invalid TaskRequest', [{ path: 'evaluator.config.tests_dir', message: 'harbor requires tests_dir' }]);
      const target = str('tests_target', '/tests').replace(/\/+$/, '') || '/tests';
      const verifier = str('verifier_dir', '/logs/verifier').replace(/\/+$/, '') || '/logs/verifier';
      const test = str('test_command', 'bash /tests/test.sh');
      const lines = [`rm -rf ${shellQuote(target)} ${shellQuote(verifier)} && mkdir -p ${shellQuote(target)} ${shellQuote(verifier)} || exit 1`];
      for (const [rel, text] of harborTests) {
        const path = `${target}/${rel}`;
        lines.push(`mkdir -p "$(dirname ${shellQuote(path)})" && printf '%s' ${shellQuote(Buffer.from(text).toString('base64'))} | base64 -d > ${shellQuote(path)} || exit 1`);
      }
      lines.push(`chmod -R +x ${shellQuote(target)} 2>/dev/null`);
      lines.push(`( ${env}${test} ); echo "POLAR_HARBOR_EXIT=$?"`);
      lines.push(`echo "${HARBOR_MARK}_TXT=$(head -c 200 ${shellQuote(`${verifier}/reward.txt`)} 2>/dev/null | tr -d '\\n\\r\\t ')"`);
      lines.push(`echo "${HARBOR_MARK}_JSON=$(head -c 600 ${shellQuote(`${verifier}/reward.json`)} 2>/dev/null | base64 | tr -d '\\n')"`);
      return { command: lines.join('\n'), timeoutS: seconds('verifier_timeout', 120) };
    }
    case 'swebench_harness': {
      const parsed = SweHarnessInstanceSchema.safeParse(cfg['instance']);
      if (!parsed.success) {
        const issue = parsed.error.issues[0]!;
        const at = ['evaluator', 'config', 'instance', ...issue.path.map(String)].join('.');
        throw new ValidationError('invalid TaskRequest', [{ path: at, message: cfg['instance'] === undefined ? "swebench_harness requires a non-empty 'instance' config" : issue.message }]);
      }
      const excludes = cfg['exclude_patterns'] ?? [];
      if (!Array.isArray(excludes) || !excludes.every((g) => typeof g === 'string' && g !== '' && !/[\n\r]/.test(g))) {
        throw new ValidationError('invalid TaskRequest', [{ path: 'evaluator.config.exclude_patterns', message: 'must be a list of non-empty glob strings' }]);
      }
      const patchCommand = cfg['patch_command'] === undefined || cfg['patch_command'] === null ? null : str('patch_command', '');
      const applyS = seconds('apply_timeout', 60);
      const testS = seconds('test_timeout', 1200);
      const command = sweHarnessScript({ instance: parsed.data, repoDir: str('repo_dir', '/testbed'), patchCommand, excludePatterns: excludes as string[], testTimeoutS: testS, envExports: env });
      return { command, timeoutS: Math.min(applyS + testS + 30, 3600), sweGrade: sweGradeOf(parsed.data) };
    }
  }
}

/** awk: `PASSED|FAILED|ERROR|SKIPPED <nodeid>` lines → `nodeid<TAB>status`, ids normalised as Polar's `_normalize_expected_nodeid`; the last status of an id wins. */
const PARSE_AWK = [
  '{ gsub(/\\033\\[[0-9;]*[A-Za-z]/, ""); sub(/^[ \\t]+/, ""); sub(/[ \\t\\r]+$/, "")',
  '  if ($0 !~ /^(PASSED|FAILED|ERROR|SKIPPED)/) next',
  '  if (NF < 2) next',
  '  st = $1; rest = $0; sub(/^[^ \\t]+[ \\t]+/, "", rest)',
  '  i = index(rest, " - "); if (i > 0) rest = substr(rest, 1, i - 1)',
  '  n = split(rest, p, "::"); if (n >= 3) id = p[n - 1] "." p[n]; else if (n == 2) id = p[2]; else id = rest',
  '  if (id != "") r[id] = st }',
  'END { for (k in r) print k "\\t" r[k] }',
].join('\n');

/** Polar's node-id normalisation: drop ` - reason`, keep `Class.method` or `function`. */
export function normalizeNodeId(nodeid: string): string {
  const id = nodeid.split(' - ')[0]!;
  const parts = id.split('::');
  if (parts.length >= 3) return parts.slice(-2).join('.');
  if (parts.length === 2) return parts[1]!;
  return id;
}

function expectedTests(raw: unknown): Map<string, string> {
  const path = 'evaluator.config.expected_output_json';
  let v = raw;
  if (typeof v === 'string') {
    try {
      v = JSON.parse(v);
    } catch {
      throw new ValidationError('invalid TaskRequest', [{ path, message: 'must be a JSON object (or its text)' }]);
    }
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw new ValidationError('invalid TaskRequest', [{ path, message: 'must be a JSON object of nodeid → status' }]);
  const out = new Map<string, string>();
  for (const [k, s] of Object.entries(v as Record<string, unknown>)) {
    const id = normalizeNodeId(k);
    if (/[\t\n\r]/.test(id) || /[\t\n\r]/.test(String(s))) throw new ValidationError('invalid TaskRequest', [{ path: `${path}.${k.slice(0, 100)}`, message: 'must not contain tabs or newlines' }]);
    out.set(id, String(s));
  }
  // The order `LC_ALL=C sort` gives the parsed lines: bytewise.
  return new Map([...out].sort(([a], [b]) => Buffer.compare(Buffer.from(`${a}\t`), Buffer.from(`${b}\t`))));
}

/**
 * The Harbor reward from the eval's output: `reward.txt` as a number, else `reward.json` (a
 * number, or the mean of an object's values), clamped to [0, 1]; null when neither was written.
 */
export function harborReward(output: string): number | null {
  // The last marker is the eval's own: the verifier's output before it may print anything.
  const last = (name: string): string => [...output.matchAll(new RegExp(`^${HARBOR_MARK}_${name}=(\\S*?)\\r?$`, 'gm'))].pop()?.[1] ?? '';
  const txt = last('TXT');
  const clamp = (x: number): number => Math.max(0, Math.min(1, x));
  if (txt !== '' && Number.isFinite(Number(txt))) return clamp(Number(txt));
  const b64 = last('JSON');
  if (b64 === '') return null;
  try {
    const data: unknown = JSON.parse(Buffer.from(b64, 'base64').toString('utf8'));
    if (typeof data === 'number' && Number.isFinite(data)) return clamp(data);
    if (data && typeof data === 'object' && !Array.isArray(data)) {
      const vals = Object.values(data as Record<string, unknown>).map(Number);
      if (vals.length > 0 && vals.every(Number.isFinite)) return clamp(vals.reduce((a, b) => a + b, 0) / vals.length);
    }
  } catch {
    // An unreadable reward file is no reward.
  }
  return null;
}
