/**
 * The Python script that runs a code task's hidden tests inside the eval sandbox. It reads
 * `.eval/tests.json`, runs each test in its own process with a time limit, writes the per-test
 * verdicts to `.eval/result.json` (a file, not stdout: the bash tool truncates long output) and
 * prints its summary as the last line, `CODE_EVAL_DONE <nonce> {"passed": p, "total": t}`. Kept as
 * a string so the handler can seed it into a sandbox with `files`.
 *
 * The verdict is that line, not the file (#27): the solution runs as the runner's child in the
 * same sandbox, so it can write the file itself and kill the runner, or leave a process that
 * rewrites it once the runner is done. The nonce comes on the runner's stdin (read, then
 * replaced by /dev/null: not in any file, argv or environment the solution can read), the
 * solutions get their own stdin (the test's input, or /dev/null), and the handler takes the
 * summary only from a runner that exited 0 and printed its nonce.
 *
 * stdin/stdout tests compare output line by line with trailing whitespace ignored (the usual
 * rule of competitive-programming judges, and DeepCoder's); `code` tests pass when the script
 * exits 0 (asserts that import the solution).
 */
export const CODE_RUNNER_PY = String.raw`import json, os, subprocess, sys
nonce = sys.stdin.readline().strip()
devnull = os.open(os.devnull, os.O_RDONLY)
os.dup2(devnull, 0)
spec = json.load(open('.eval/tests.json'))
solution, limit = spec['solution_file'], spec['timeout_s']
def norm(s):
    return [l.rstrip() for l in s.strip().splitlines()]
results = []
for i, t in enumerate(spec['tests']):
    try:
        if 'code' in t:
            path = '.eval/test_%d.py' % i
            with open(path, 'w') as f:
                f.write(t['code'])
            p = subprocess.run([sys.executable, path], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=limit, env=dict(os.environ, PYTHONPATH=os.getcwd()))
            ok = p.returncode == 0
            why = '' if ok else (p.stderr or p.stdout)[-300:]
        else:
            p = subprocess.run([sys.executable, solution], input=t['input'], capture_output=True, text=True, timeout=limit)
            ok = p.returncode == 0 and norm(p.stdout) == norm(t['output'])
            why = '' if ok else ('exit %d: %s' % (p.returncode, p.stderr[-300:]) if p.returncode else 'wrong output: %r' % p.stdout[:200])
    except subprocess.TimeoutExpired:
        ok, why = False, 'timed out after %ss' % limit
    results.append({'ok': ok, 'why': why})
summary = {'passed': sum(r['ok'] for r in results), 'total': len(results)}
try:
    with open('.eval/result.json', 'w') as f:
        json.dump(dict(summary, results=results), f)
except OSError:
    pass  # the details only; the verdict is the line below
print('CODE_EVAL_DONE %s %s' % (nonce, json.dumps(summary)))
`;
