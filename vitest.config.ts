import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Integration and e2e tests start real processes, ptys and servers; two workers
    // match the two cores of the CI machine.
    maxWorkers: 2,
    // A test that starts a CLI process (`rollout run`, `serve`, `worker`: ~20 s each at load 10
    // on two cores, through tsx) may take as long as the CLI's own start ceiling, 60 s; a test
    // that starts more than one says so itself.
    testTimeout: 60_000,
    // Hooks start real servers (rollout serve, Redis, engines), whose own start-up ceiling is
    // 60 s on a loaded machine: the hook waits that long before vitest gives up on it.
    hookTimeout: 90_000,
    teardownTimeout: 10_000,
    // expect.poll waits for something another process or the browser does; on a loaded 2-core
    // CI machine that can take longer than vitest's 1 s default. It still fails on a wrong value.
    expect: { poll: { timeout: 10_000 } },
    // The JSON report lets .ci/run print one plain `N passed, N failed` line.
    reporters: ['default', ['json', { outputFile: 'test-output/vitest-results.json' }]],
  },
});
