import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Tests start real processes and sockets; on a 2-core machine a few
    // files at a time keeps timing-sensitive checks honest.
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 30_000,
    teardownTimeout: 10_000,
    reporters: ['default'],
    globalSetup: ['test/global-setup.ts'],
  },
});
