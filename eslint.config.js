// ESLint flat config: correctness rules only (no formatting rules; the code's layout is its own).
// typescript-eslint's `recommended` set without type information keeps a full run within a few
// seconds on a 2-core CI machine; `tsc --noEmit` (npm run typecheck) does the type checking.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['node_modules/**', 'dist/**', 'test-output/**', 'visualizer/dist/**', '**/*.d.ts'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    rules: {
      // `_`-prefixed parameters document a deliberately unused slot (XState stubs, callbacks).
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      // Tests and protocol glue parse JSON into `any` on purpose; the types come from zod at the edges.
      '@typescript-eslint/no-explicit-any': 'off',
      'no-empty': ['error', { allowEmptyCatch: true }],
      // `const self = this` for a generator or a getter object that needs the instance.
      '@typescript-eslint/no-this-alias': ['error', { allowedNames: ['self'] }],
      // TypeScript's definite-assignment analysis already checks a `let` set in every branch.
      'no-useless-assignment': 'off',
      // A `let` read by a closure before its one assignment (a server its own handler closes) stays `let`.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
    },
  },
  {
    // Tests count and flag with short expressions (`if (!done) (done = true), n--`).
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: { '@typescript-eslint/no-unused-expressions': 'off' },
  },
  {
    // The product never imports its test doubles (only their index and the fake-llm command do).
    files: ['src/**/*.ts', 'machines/**/*.ts'],
    ignores: ['src/testing/**', 'src/cli/commands/fake-llm.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [{ group: ['**/testing/*', '**/testing'], message: 'src/ must not import src/testing/ (test doubles stay out of the product)' }] }],
    },
  },
  {
    // Machines are pure XState definitions: no Node, no runtime.
    files: ['machines/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [{ group: ['node:*', '../src/*', '../src/**'], message: 'machines/ stay pure: import only xstate and each other' }] }],
    },
  },
  {
    // Plain JS (the visualizer's browser modules, bin/): browser and Node globals are not
    // declared to ESLint; the visualizer's browser e2e test catches an undefined name.
    files: ['**/*.js', '**/*.mjs', '**/*.cjs'],
    rules: { 'no-undef': 'off' },
  },
);
