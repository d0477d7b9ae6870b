import { describe, expect, it } from 'vitest';
import { ASSUMED_DISK_BYTES_PER_S, BASE_WAKE_TIMEOUT_MS, wakeDeadline } from '../../../../src/agent/supervisor/shard/wake-deadline.js';

/* Issue 47 item 5 (review engine-fidelity-3 E7): a level-2 wake reads the model from disk; its deadline follows. */

const GIB = 1024 ** 3;

describe('wakeDeadline', () => {
  it('gives a vLLM level-2 wake of 30 GiB at a measured 200 MiB/s far more than the fixed 120 s: 120 s + 2 x 153.6 s', () => {
    const d = wakeDeadline({ engine: 'vllm', level: 2, modelBytes: 30 * GIB, awakeMib: 70000, disk: { bytes: 200 * 1024 * 1024, ms: 1000, atMs: 0 } });
    expect(d.ms).toBe(Math.ceil(BASE_WAKE_TIMEOUT_MS + 2 * 153.6 * 1000));
    expect(d.why).toMatch(/^level-2 reload of 30720 MiB \(the model in the store\) at the disk rate measured here \(200 MiB\/s\), 2x, plus 120 s$/);
  });

  it('keeps 120 s for a wake that reads nothing from disk: vLLM level 1, SGLang at either level', () => {
    for (const [engine, level] of [['vllm', 1], ['sglang', 1], ['sglang', 2]] as const) {
      expect(wakeDeadline({ engine, level, modelBytes: 300 * GIB, awakeMib: 70000 }).ms).toBe(BASE_WAKE_TIMEOUT_MS);
    }
  });

  it('falls back to what the GPUs held awake, and to an assumed rate before any was measured, saying so', () => {
    const d = wakeDeadline({ engine: 'vllm', level: 2, modelBytes: 0, awakeMib: 10240 });
    expect(d.ms).toBe(Math.ceil(BASE_WAKE_TIMEOUT_MS + (2 * 10240 * 1024 * 1024 * 1000) / ASSUMED_DISK_BYTES_PER_S));
    expect(d.why).toMatch(/what its GPUs held awake.*an assumed 200 MiB\/s \(no disk rate measured yet\)/);
  });

  it('takes supervisor.wake_timeout when it is set', () => {
    expect(wakeDeadline({ engine: 'vllm', level: 2, modelBytes: 30 * GIB, awakeMib: 1, configuredMs: 45_000 })).toEqual({ ms: 45_000, why: 'supervisor.wake_timeout' });
  });
});
