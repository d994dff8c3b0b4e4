/**
 * Tests of a code instance given the way DeepCoder / Eurus / APPS / TACO rows carry them
 * (REFERENCE.md §5): `reward_model.ground_truth` (or APPS' `input_output`), a JSON string or an
 * object, holding either a list of `{input, output}` cases or `{inputs: [...], outputs: [...]}`
 * with an optional `fn_name`. Without `fn_name` the cases are stdin/stdout tests; with it each
 * case calls that function (top-level, or a method of a LeetCode-style `Solution` class) with the
 * input's arguments and compares the return value. Converted to the code handler's own `tests`.
 */

/** A test in the code handler's own form. */
export type CodeTest = { input: string; output: string } | { code: string; name?: string };

/** Why ground truth could not be read; the handler turns it into a TaskError naming the field. */
export class GroundTruthError extends Error {
  override readonly name = 'GroundTruthError';
}

/** Reads the tests out of `raw` (string or parsed). Throws {@link GroundTruthError}. */
export function testsFromGroundTruth(raw: unknown, solutionFile: string): CodeTest[] {
  let gt = raw;
  if (typeof gt === 'string') {
    try {
      gt = JSON.parse(gt);
    } catch {
      throw new GroundTruthError('is a string that is not JSON');
    }
  }
  if (Array.isArray(gt)) {
    return gt.map((t, i) => {
      if (t === null || typeof t !== 'object') throw new GroundTruthError(`case ${i} is not an object`);
      const c = t as Record<string, unknown>;
      return { input: text(c['input'], i, 'input'), output: text(c['output'], i, 'output') };
    });
  }
  if (gt === null || typeof gt !== 'object') throw new GroundTruthError('must be a list of {input, output} or an object {inputs, outputs, fn_name?}');
  const o = gt as Record<string, unknown>;
  const inputs = o['inputs'];
  const outputs = o['outputs'];
  if (!Array.isArray(inputs) || !Array.isArray(outputs)) throw new GroundTruthError("needs 'inputs' and 'outputs' lists");
  if (inputs.length !== outputs.length) throw new GroundTruthError(`has ${inputs.length} inputs for ${outputs.length} outputs`);
  if (inputs.length === 0) throw new GroundTruthError('has no test cases');
  const fn = o['fn_name'];
  if (typeof fn === 'string' && fn.trim()) {
    if (!/^[A-Za-z_]\w*$/.test(fn)) throw new GroundTruthError(`fn_name '${fn.slice(0, 50)}' is not a Python identifier`);
    return inputs.map((inp, i) => ({ name: `${fn} case ${i}`, code: callTest(solutionFile, fn, inp, outputs[i]) }));
  }
  return inputs.map((inp, i) => ({ input: text(inp, i, 'inputs'), output: text(outputs[i], i, 'outputs') }));
}

function text(v: unknown, i: number, what: string): string {
  if (typeof v === 'string') return v;
  // APPS stores some cases as lists of lines.
  if (Array.isArray(v) && v.every((x) => typeof x === 'string')) return v.join('\n');
  if (typeof v === 'number') return String(v);
  throw new GroundTruthError(`case ${i}: ${what} is not text`);
}

/**
 * A Python script that loads the solution file, calls `fn` with the case's arguments and exits 0
 * when the result matches. Arguments are a JSON list (one item per argument) or, as some rows
 * store them, a string of one JSON value per line. A one-element expected list also matches its
 * element (APPS wraps return values so). Data goes in as JSON literals inside Python strings,
 * never as code.
 */
function callTest(solutionFile: string, fn: string, input: unknown, output: unknown): string {
  return [
    'import importlib.util, json, sys',
    `spec = importlib.util.spec_from_file_location("solution", ${JSON.stringify(solutionFile)})`,
    'mod = importlib.util.module_from_spec(spec)',
    'spec.loader.exec_module(mod)',
    `name = ${JSON.stringify(fn)}`,
    'f = getattr(mod, name, None)',
    "if f is None and hasattr(mod, 'Solution'):",
    '    f = getattr(mod.Solution(), name)',
    'if f is None:',
    "    sys.exit('no function ' + name)",
    `raw = json.loads(${JSON.stringify(JSON.stringify(input))})`,
    'if isinstance(raw, str):',
    '    args = [json.loads(l) for l in raw.splitlines() if l.strip()]',
    'elif isinstance(raw, list):',
    '    args = raw',
    'else:',
    '    args = [raw]',
    `expected = json.loads(${JSON.stringify(JSON.stringify(output))})`,
    'got = json.loads(json.dumps(f(*args)))',
    'ok = got == expected or (isinstance(expected, list) and len(expected) == 1 and got == expected[0])',
    "sys.exit(0 if ok else 'expected %r, got %r' % (expected, got))",
    '',
  ].join('\n');
}
