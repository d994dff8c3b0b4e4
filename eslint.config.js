// ESLint flat config: correctness rules only (no formatting rules; the code's layout is its own).
// typescript-eslint's `recommended` set without type information keeps a full run within a few
// seconds on a 2-core CI machine; `tsc --noEmit` (npm run typecheck) does the type checking.
import js from '@eslint/js';
import boundaries from 'eslint-plugin-boundaries';
import tseslint from 'typescript-eslint';

/**
 * The layers of src/, top to bottom (STYLE.md §20): a file imports from its own folder and the
 * layers below it, never above. `llm` and `ipc` share a floor and do not import each other.
 * `ground` is the files directly in src/ (errors, clock, rng, json-depth, package-root).
 * `machines/` are pure XState definitions any layer may use (they import only each other);
 * `src/testing/` (the test doubles) may use every layer and no product file imports it but the
 * `fake-llm` command, which exists to serve a fake; `src/index.ts` is the public surface over
 * all of it. The README's architecture section shows the same order.
 */
const LAYERS = [['cli'], ['cluster'], ['server'], ['runtime'], ['handlers'], ['proxy'], ['sandbox'], ['llm', 'ipc'], ['protocol'], ['ground']];
const below = (i) => LAYERS.slice(i + 1).flat();
const layerPolicies = LAYERS.flatMap((floor, i) =>
  floor.map((type) => ({ from: { element: { types: [type] } }, allow: { to: { element: { types: [type, ...below(i), 'machines'] } } } })),
);

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
    // Type-aware checks on the product: a promise nobody awaits or catches, a promise passed where
    // a void callback is expected, `await` on a non-promise, and `any`. Only src/ (tests and
    // benches parse JSON into `any` on purpose); the project service shares one TypeScript
    // program across files, which keeps `npm run lint` within CI's patience (measured in README).
    files: ['src/**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/no-explicit-any': 'error',
    },
  },
  {
    // One clock (STYLE.md §5): the runtime process reads time and arms timers only through the
    // injected Clock (src/clock.ts: now, setTimeout, every, sleep), so every time-dependent test
    // can run on ManualClock. Outside that rule: the clock itself, the CLI (a process's edge), the
    // sandbox host process (its own process on its own clock: host-sandbox, host-shell, pty-session,
    // python-repl, cgroup, network, sandbox-host, the in-sandbox forwarder and its listener
    // hand-off, and the integrity monitor it runs per action), lease.ts (compares a file's mtime,
    // which is wall-clock by nature), remove-tree.ts
    // (a unique name suffix, not a time), and the image store (src/sandbox/images/, which takes an
    // injected `now` and is kept by its own owner).
    files: ['src/**/*.ts'],
    ignores: [
      'src/clock.ts',
      'src/cli/**',
      'src/sandbox/{sandbox-host,host-sandbox,host-shell,pty-session,python-repl,cgroup,network,llm-proxy-forwarder,llm-listener-handoff,lease,remove-tree}.ts',
      'src/sandbox/images/**',
      'src/sandbox/integrity/**',
    ],
    rules: {
      'no-restricted-globals': ['error', ...['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval'].map((name) => ({ name, message: 'time goes through the injected Clock (src/clock.ts: clock.setTimeout, every, sleep)' }))],
      'no-restricted-properties': ['error', ...['Date', 'performance'].map((object) => ({ object, property: 'now', message: 'time goes through the injected Clock (clock.now())' }))],
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
    // The layer order above, checked on every import of src/ and machines/ (upward is an error).
    files: ['src/**/*.ts', 'machines/**/*.ts'],
    plugins: { boundaries },
    settings: {
      // `./clock.js` names `clock.ts`: the TypeScript resolver maps it as tsc does.
      'import/resolver': { typescript: { project: './tsconfig.json' } },
      'boundaries/include': ['src/**/*.ts', 'machines/**/*.ts'],
      'boundaries/elements': [
        { type: 'testing', pattern: 'src/testing', partialMatch: false },
        ...LAYERS.flat().filter((t) => t !== 'ground').map((type) => ({ type, pattern: `src/${type}`, partialMatch: false })),
        { type: 'machines', pattern: 'machines', partialMatch: false },
        // Last: the first descriptor that matches names a file's element.
        { type: 'ground', pattern: 'src', partialMatch: false },
      ],
      'boundaries/files': [
        { category: 'api', pattern: 'src/index.ts' },
        { category: 'fake-llm-command', pattern: 'src/cli/commands/fake-llm.ts' },
      ],
    },
    rules: {
      'boundaries/dependencies': ['error', {
        default: 'disallow',
        message: 'upward import: {{from.type}} may import only its own folder and the layers below it (cli → cluster → server → runtime → handlers → proxy → sandbox → llm / ipc → protocol → ground; see eslint.config.js)',
        policies: [
          ...layerPolicies,
          { from: { element: { types: ['machines'] } }, allow: { to: { element: { types: ['machines'] } } } },
          { from: { element: { types: ['testing'] } }, allow: { to: { element: { types: ['*'] } } } },
          { from: { file: { categories: ['api'] } }, allow: { to: { element: { types: ['*'] } } } },
          { from: { file: { categories: ['fake-llm-command'] } }, allow: { to: { element: { types: ['testing'] } } } },
        ],
      }],
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
  {
    // The visualizer's browser modules: an undefined name is an error. The browser globals the
    // page uses are listed here (no `globals` dependency for a dozen names); a new one is added
    // when the lint names it. TypeScript checks every file further (visualizer/tsconfig.json, checkJs).
    files: ['visualizer/**/*.js'],
    languageOptions: {
      sourceType: 'module',
      globals: Object.fromEntries(
        ['window', 'document', 'location', 'history', 'console', 'fetch', 'WebSocket', 'URL', 'URLSearchParams', 'Blob', 'Option', 'requestAnimationFrame', 'performance', 'setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'getComputedStyle', 'IntersectionObserver', 'HTMLElement', 'HTMLCanvasElement', 'HTMLSelectElement', 'HTMLInputElement', 'HTMLButtonElement', 'SVGElement', 'SVGSVGElement', 'Node'].map((name) => [name, 'readonly']),
      ),
    },
    rules: { 'no-undef': 'error' },
  },
);
