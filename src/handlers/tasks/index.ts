export { mathHandler, MathInstanceSchema } from './math.js';
export { codeHandler, CodeInstanceSchema } from './code.js';
export { sweHandler, SweInstanceSchema } from './swe.js';
export { stemHandler, StemInstanceSchema } from './stem.js';
export { shellHandler, ShellInstanceSchema } from './shell.js';
export { extractBoxed, extractMathAnswer, mathAnswersMatch, parseNumber, extractChoice } from './answer-check.js';
export { harnessHandler, HarnessInstanceSchema } from './harness.js';
