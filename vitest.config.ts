import { defineConfig } from 'vitest/config';
import SlowFirstSequencer from './test/slow-first-sequencer.js';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Tests start real processes and sockets, and much of their time is
    // waiting on them: with 2 workers on this 2-core machine the CPUs sat 40%
    // idle (/proc/stat over a full run, 2026-12-02), and 3 workers ran the
    // suite in 390 s against 503 s, 74% busy, every test passing. That was
    // after the fake nvidia-smi became a shell script; before it, 3 workers
    // were barely faster and timing-sensitive systemd-lab tests failed.
    // 4 workers, tried from a fresh clone (2026-12-07): 626 s against 681 s
    // with 3, but the CPUs 92% busy and the tests' summed time 2437 s against
    // 1992 s; 8% is not worth running every timing-sensitive test that close
    // to a saturated machine.
    maxWorkers: 3,
    // Each file still gets its own module instances and hooks, but in a
    // worker reused from the file before, not a freshly forked one: starting
    // a fork and importing src/ again cost 3-5 s per file on this machine,
    // some 250 files. Tests that change process-wide state (env, umask, PATH)
    // put it back in their own hooks.
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
