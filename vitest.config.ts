import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Child processes, not worker threads: tests start servers and child processes of their own.
    pool: 'forks',
    // Every test file creates its own database (test/helpers/database.ts), so files may run in
    // parallel; the CI machine has 2 cores.
    fileParallelism: true,
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
