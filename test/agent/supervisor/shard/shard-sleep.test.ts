import { create } from '@bufbuild/protobuf';
import { SGLANG_SLEEP_API } from '../../../../src/agent/engines/sglang/sglang-sleep.js';
import { VLLM_SLEEP_API } from '../../../../src/agent/engines/vllm/vllm-sleep.js';
import type { EngineSleepApi } from '../../../../src/lib/engine-sleep-api.js';

/** The API each engine's wing gives (Engine.sleepApi), by name; none for any other. */
const engineSleepApi = (engine: string): EngineSleepApi | undefined => ({ vllm: VLLM_SLEEP_API, sglang: SGLANG_SLEEP_API })[engine];
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ShardState, type StartShard, StartShardSchema } from '../../../../src/gen/llmgw/v1/agent_pb.js';
import { checkHostRoom } from '../../../../src/agent/supervisor/shard/host-room.js';
import {
  awaitFirstReading,
  awaitGpuMemory,
  hostCopyAdvice,
  judgeSleep,
  memAvailableMib,
  nextReadDelayMs,
  READ_NOW_INTERVAL_MS,
  shardGpuMib,
} from '../../../../src/agent/supervisor/shard/shard-sleep.js';

/* The pure judgements of a SleepShard (issue 30): what is refused before the engine is touched. */

const S = ShardState;
let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-shard-sleep-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** The API the agent's composition gives the shard of `s` (Engine.sleepApi). */
const apiOf = (s: StartShard) => engineSleepApi(s.profile?.engine ?? '');

function spec(engine: string, sleepMode = true): StartShard {
  return create(StartShardSchema, { shardId: 's1', replicaId: 'r1', gpuIndices: [0], profile: { name: 'p1', engine, sleepMode } });
}

/** A /proc/meminfo stand-in with `availableMib` available. */
function meminfo(availableMib: number): string {
  const path = join(dir, 'meminfo');
  writeFileSync(path, `MemTotal:       263842764 kB\nMemFree:         1000000 kB\nMemAvailable:   ${availableMib * 1024} kB\n`);
  return path;
}

describe('judgeSleep', () => {
  it('takes level 1 and 2 of a READY vLLM or SGLang shard whose profile sets sleep_mode', () => {
    expect(judgeSleep('s1', S.READY, spec('vllm'), 1, apiOf(spec('vllm')))).toBeDefined();
    expect(judgeSleep('s1', S.READY, spec('vllm'), 2, apiOf(spec('vllm')))).toBeDefined();
    expect(judgeSleep('s1', S.READY, spec('sglang'), 1, apiOf(spec('sglang')))).toBeDefined();
  });

  it.each([0, 3, -1, 1.5])('refuses level %s with one line naming the two levels', (level) => {
    expect(() => judgeSleep('s1', S.READY, spec('vllm'), level, apiOf(spec('vllm')))).toThrow(`sleep refused: level ${level} is not 1 (weights to host RAM) or 2 (weights dropped)`);
  });

  it('refuses an engine without a sleep mode, a profile without sleep_mode and a shard not READY', () => {
    expect(() => judgeSleep('s1', S.READY, spec('llamacpp'), 1, apiOf(spec('llamacpp')))).toThrow(/^sleep refused: engine llamacpp of shard s1 has no sleep mode$/);
    expect(() => judgeSleep('s1', S.READY, spec('vllm', false), 1, apiOf(spec('vllm', false)))).toThrow(/^sleep refused: profile p1 of shard s1 does not set sleep_mode$/);
    for (const state of [S.STARTING, S.UNHEALTHY, S.DRAINING, S.SLEEPING]) {
      expect(() => judgeSleep('s1', state, spec('vllm'), 1, apiOf(spec('vllm')))).toThrow(/^sleep refused: shard s1 is \w+; only a READY shard can sleep$/);
    }
  });

  it('judges the level before anything else', () => {
    expect(() => judgeSleep('s1', S.STARTING, spec('llamacpp', false), 3, apiOf(spec('llamacpp', false)))).toThrow(/level 3/);
  });
});

describe('shardGpuMib', () => {
  it('sums the shard GPUs and is undefined while one has no reading', () => {
    expect(shardGpuMib([100, 200, 300], [0, 2])).toBe(400);
    expect(shardGpuMib([100], [0, 1])).toBeUndefined();
    expect(shardGpuMib([], [5])).toBeUndefined();
  });
});

describe('host RAM for the copy a sleep keeps', () => {
  const vllm = engineSleepApi('vllm');
  const sglang = engineSleepApi('sglang');
  if (!vllm || !sglang) throw new Error('vllm and sglang have sleep APIs');

  it('reads MemAvailable in MiB', async () => {
    expect(await memAvailableMib(meminfo(5000))).toBe(5000);
  });

  it('refuses vLLM level 1 when the host has less available than the GPUs hold, and says to use level 2', async () => {
    const instead = hostCopyAdvice(vllm, 1, undefined) as string;
    await expect(checkHostRoom(1, 70000, 0, instead, { meminfo: meminfo(69999) })).rejects.toThrow(
      'sleep refused: level 1 copies up to 70000 MiB of weights to pinned host RAM and only 69999 MiB is available (MemAvailable); use level 2',
    );
    await expect(checkHostRoom(1, 70000, 0, instead, { meminfo: meminfo(70000) })).resolves.toBeUndefined();
  });

  it('asks no room of vLLM level 2, which drops the weights', () => {
    expect(hostCopyAdvice(vllm, 2, undefined)).toBeUndefined();
  });

  it('asks room of SGLang at both levels (issue 47: its pinned copy is made at either), and never recommends level 2 there', async () => {
    for (const level of [1, 2] as const) {
      const instead = hostCopyAdvice(sglang, level, undefined);
      expect(instead).toBe('free host memory, or stop the shard instead (SGLang keeps this copy at both levels)');
      await expect(checkHostRoom(level, 70000, 0, instead as string, { meminfo: meminfo(69999) })).rejects.toThrow(
        new RegExp(`^sleep refused: level ${level} copies up to 70000 MiB .* only 69999 MiB is available \\(MemAvailable\\); free host memory, or stop the shard instead`),
      );
    }
  });

  it('asks SGLang no room again for the copy it already holds since its first sleep', () => {
    expect(hostCopyAdvice(sglang, 1, 8000)).toBeUndefined();
    expect(hostCopyAdvice(sglang, 2, 8000)).toBeUndefined();
    // vLLM frees its copy at the wake: every level-1 sleep needs the room again.
    expect(hostCopyAdvice(vllm, 1, 8000)).toBe('use level 2');
  });

  it('refuses when meminfo has no MemAvailable line', async () => {
    const path = join(dir, 'meminfo');
    writeFileSync(path, 'MemTotal: 1 kB\n');
    await expect(checkHostRoom(1, 1, 0, 'use level 2', { meminfo: path })).rejects.toThrow(`sleep refused: ${path} has no MemAvailable line`);
  });
});

describe('awaitFirstReading', () => {
  const signal = new AbortController().signal;

  it('waits for the sampler first reading of the shard GPUs instead of refusing', async () => {
    const readyAt = Date.now() + 300;
    const probes = { gpuMemoryMib: () => (Date.now() >= readyAt ? [0, 0, 0, 0, 0, 70000] : []), pollMs: 20, firstReadingMs: 2000 };
    expect(await awaitFirstReading(probes, [5], signal)).toBe(70000);
  });

  it('refuses with one line when no reading comes in time', async () => {
    const started = Date.now();
    await expect(awaitFirstReading({ gpuMemoryMib: () => [1, 2], pollMs: 20, firstReadingMs: 200 }, [5], signal)).rejects.toThrow(
      /^sleep refused: no GPU memory reading for GPUs 5 in /,
    );
    expect(Date.now() - started).toBeGreaterThanOrEqual(190);
  });

  it('waits for a reading taken after the request, not the stale one the sampler holds', async () => {
    let readAt = Date.now() - 500;
    let used = [17];
    setTimeout(() => {
      used = [70000];
      readAt = Date.now();
    }, 300);
    const probes = { gpuMemoryMib: () => used, readAtMs: () => readAt, pollMs: 20, firstReadingMs: 2000 };
    expect(await awaitFirstReading(probes, [0], signal)).toBe(70000);
    const stale = { gpuMemoryMib: () => [17], readAtMs: () => 1, pollMs: 20, firstReadingMs: 100 };
    await expect(awaitFirstReading(stale, [0], signal)).rejects.toThrow(/^sleep refused: no new GPU memory reading for GPUs 0 in /);
  });

  it('answers at once when the reading is there', async () => {
    expect(await awaitFirstReading({ gpuMemoryMib: () => [10, 20], firstReadingMs: 60_000 }, [0, 1], signal)).toBe(30);
  });
});

/**
 * A sampler stand-in that answers readNow from `fresh` in turn (the last
 * repeated) and records every call, in order; `latest` is what its loop last
 * read, never changing.
 */
function stubSampler(fresh: (number[] | Error)[], latest: number[] = []) {
  const calls: string[] = [];
  let i = 0;
  const probes = {
    gpuMemoryMib: () => {
      calls.push('latest');
      return latest;
    },
    readNow: async () => {
      calls.push('readNow');
      const r = fresh[Math.min(i++, fresh.length - 1)] as number[] | Error;
      if (r instanceof Error) throw r;
      return r;
    },
    pollMs: 20,
    timeoutMs: 10_000,
    firstReadingMs: 10_000,
  };
  return { probes, calls };
}

describe('awaitGpuMemory with fresh reads (issue 36 item 8)', () => {
  const signal = new AbortController().signal;
  const freed = (mib: number) => mib <= 50;

  it('reads at once and answers from that read, without waiting for the sampler', async () => {
    // The sampler's loop still shows the memory held: only a fresh read sees the release.
    const { probes, calls } = stubSampler([[0, 40]], [0, 100]);
    expect(await awaitGpuMemory(probes, [1], freed, 'not freed', signal)).toBe(40);
    expect(calls).toEqual(['readNow']);
  });

  it('reads again until the memory has changed, never consulting the stale loop', async () => {
    const { probes, calls } = stubSampler([[100], [100], [30]], [100]);
    expect(await awaitGpuMemory(probes, [0], freed, 'not freed', signal)).toBe(30);
    expect(calls).toEqual(['readNow', 'readNow', 'readNow']);
  });

  it('falls back to the sampler\'s last reading when a fresh read fails', async () => {
    const { probes, calls } = stubSampler([new Error('nvidia-smi exited with code 9'), [20]], [45]);
    expect(await awaitGpuMemory(probes, [0], freed, 'not freed', signal)).toBe(45);
    expect(calls).toEqual(['readNow', 'latest']);
  });

  it('names the GPUs and the last fresh figure when the memory never changes', async () => {
    const { probes } = stubSampler([[100]]);
    await expect(awaitGpuMemory({ ...probes, timeoutMs: 0 }, [0], freed, 'the engine did not free its GPU memory', signal)).rejects.toThrow(
      'the engine did not free its GPU memory: GPUs 0 still hold 100 MiB',
    );
  });
});

describe('awaitFirstReading with fresh reads', () => {
  const signal = new AbortController().signal;

  it('takes a fresh read at once instead of waiting for the sampler\'s next tick', async () => {
    // The loop's reading predates the request: without readNow this waits for a tick that never comes here.
    const { probes, calls } = stubSampler([[7, 70000]], [7, 17]);
    const stale = { ...probes, readAtMs: () => 1, firstReadingMs: 100 };
    expect(await awaitFirstReading(stale, [1], signal)).toBe(70000);
    expect(calls).toEqual(['readNow']);
  });

  it('uses a fresh loop reading when the fresh read fails', async () => {
    const { probes, calls } = stubSampler([new Error('no nvidia-smi')], [5]);
    expect(await awaitFirstReading({ ...probes, readAtMs: () => Date.now() + 1 }, [0], signal)).toBe(5);
    expect(calls).toEqual(['readNow', 'latest']);
  });
});

describe('nextReadDelayMs', () => {
  it('starts at 50 ms, keeps at least twice a slow read apart, and grows up to the cap', () => {
    expect(nextReadDelayMs(0, 1, 250)).toBe(READ_NOW_INTERVAL_MS);
    expect(nextReadDelayMs(0, 80, 250)).toBe(160);
    expect(nextReadDelayMs(1, 1, 250)).toBe(75);
    expect(nextReadDelayMs(2, 1, 250)).toBe(112.5);
    expect(nextReadDelayMs(30, 1, 250)).toBe(250);
    expect(nextReadDelayMs(30, 400, 250)).toBe(250);
    // A cap below the first gap (a test's short pollMs) does not shorten it.
    expect(nextReadDelayMs(0, 1, 20)).toBe(READ_NOW_INTERVAL_MS);
  });
});
