import { defineConfig } from 'vitest/config';
import SlowFirstSequencer from './test/slow-first-sequencer.js';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Tests start real processes and sockets; on a 2-core machine a few
    // files at a time keeps timing-sensitive checks honest.
    maxWorkers: 2,
    // Each file still gets its own module instances and hooks, but in a
    // worker reused from the file before, not a freshly forked one: starting
    // a fork and importing src/ again cost 3-5 s per file on this machine,
    // some 200 files. Tests that change process-wide state (env, umask, PATH)
    // put it back in their own hooks. 3 workers were measured too: barely
    // faster here, and timing-sensitive systemd-lab tests failed.
    isolate: false,
    testTimeout: 30_000,
    hookTimeout: 30_000,
    teardownTimeout: 10_000,
    reporters: ['default'],
    globalSetup: ['test/global-setup.ts'],
    // Longest files first (test/slow-first-sequencer.ts says why).
    sequence: { sequencer: SlowFirstSequencer },
  },
});
