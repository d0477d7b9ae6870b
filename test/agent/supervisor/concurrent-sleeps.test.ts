import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { VllmEngine } from '../../../src/agent/engines/vllm/vllm-engine.js';
import { HostRamLedger } from '../../../src/agent/supervisor/shard/host-ram-ledger.js';
import type { SleepProbes } from '../../../src/agent/supervisor/shard/shard-sleep.js';
import type { Supervisor } from '../../../src/agent/supervisor/supervisor.js';
import { ShardState } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { parseShardId, parseStartShard } from '../../../src/lib/shard-id.js';
import { readGpuUsage } from '../../../src/sim/fake-gpu-usage.js';
import { doubleStart } from '../../helpers/double-shards.js';
import { freePort, until } from '../../helpers/engine-processes.js';
import { FAKE_VLLM } from '../../helpers/fake-engines.js';
import { useSupervisors } from '../../helpers/use-supervisors.js';

/*
 * Security review 4, F8: concurrent level-1 sleeps each passed the host-RAM
 * check against the same MemAvailable before any had copied its weights.
 * Two vLLM doubles on GPUs 0 and 1 hold 600 MiB each; the host (a
 * /proc/meminfo stand-in) has `available` MiB. The first sleep is held
 * unfinished by its GPU reading (the fake hardware still shows its memory
 * until the test lets it fall), so the second is asked while the first's
 * copy is under way, every time.
 */

const harness = useSupervisors();
const engine = new VllmEngine({ command: [FAKE_VLLM, 'serve'], allowSleepMode: true }, 'lo');
const MIB = 600;
const id = (s: string) => parseShardId(s);
let held = false;
afterEach(() => {
  held = false;
});

async function twoDoubles(available: number): Promise<{ sup: Supervisor; probes: SleepProbes }> {
  const dir = harness.dirs.root;
  const usageDir = join(dir, 'gpu-usage');
  const roomDir = join(dir, 'room');
  mkdirSync(usageDir, { recursive: true });
  mkdirSync(roomDir, { recursive: true });
  writeFileSync(join(roomDir, 'meminfo'), `MemTotal: 2000000 kB\nMemAvailable: ${available * 1024} kB\n`);
  const sup = harness.newSupervisor();
  for (const [name, gpu] of [['a', 0], ['b', 1]] as const) {
    const spec = doubleStart('vllm', name, await freePort(), { gpus: [gpu], args: ['--sim-gpu-memory', String(MIB), '--sim-gpu-usage-dir', usageDir] });
    if (spec.profile) spec.profile.sleepMode = true;
    const plan = engine.command(spec);
    await sup.start(parseStartShard(spec), { plan, servesHttp: true, watch: engine.watch(spec, plan) });
  }
  await sup.settle(id('a'), { timeoutMs: 30_000 });
  await sup.settle(id('b'), { timeoutMs: 30_000 });
  const probes: SleepProbes = {
    // GPU 0 shows its memory while `held`: shard a's sleep waits for it to fall, unfinished.
    gpuMemoryMib: () => {
      const used = readGpuUsage(usageDir);
      return [held ? MIB : (used.get(0) ?? 0), used.get(1) ?? 0];
    },
    meminfoPath: join(roomDir, 'meminfo'),
    // No cgroup and no NUMA limit: MemAvailable alone is judged.
    hostRoomPaths: { cgroupRoot: roomDir, nodeRoot: roomDir },
    hostRam: new HostRamLedger(),
    pollMs: 20,
    firstReadingMs: 5000,
    timeoutMs: 30_000,
  };
  return { sup, probes };
}

describe('concurrent level-1 sleeps against host RAM (security review 4, F8)', () => {
  it('refuses the second of two sleeps that each fit but not together, in one line, while the first sleeps; the second fits once the first has finished', async () => {
    const { sup, probes } = await twoDoubles(1000);
    held = true;
    const first = sup.sleep(id('a'), 1, probes);
    first.catch(() => undefined);
    await until(() => sup.get(id('a'))?.state === ShardState.SLEEPING, 'shard a admitted (SLEEPING)', 20_000);
    await expect(sup.sleep(id('b'), 1, probes)).rejects.toThrow(
      /^sleep refused: level 1 copies up to 600 MiB of weights to pinned host RAM and 1000 MiB is available \(MemAvailable\), 600 MiB of it promised to the sleep of a under way; wait for it, or use level 2$/,
    );
    expect(sup.get(id('b'))?.state).toBe(ShardState.READY);
    held = false;
    const a = await first;
    expect([a.state, a.error]).toEqual([ShardState.SLEEPING, '']);
    // Its copy made, the claim is gone: the host's figure alone judges the next one.
    const b = await sup.sleep(id('b'), 1, probes);
    expect([b.state, b.error]).toEqual([ShardState.SLEEPING, '']);
  });

  it('admits two concurrent sleeps that fit together (look-alike: the same two, more host RAM)', async () => {
    const { sup, probes } = await twoDoubles(1200);
    held = true;
    const first = sup.sleep(id('a'), 1, probes);
    first.catch(() => undefined);
    await until(() => sup.get(id('a'))?.state === ShardState.SLEEPING, 'shard a admitted (SLEEPING)', 20_000);
    const b = await sup.sleep(id('b'), 1, probes);
    expect([b.state, b.error]).toEqual([ShardState.SLEEPING, '']);
    held = false;
    const a = await first;
    expect([a.state, a.error]).toEqual([ShardState.SLEEPING, '']);
  });

  it('never counts a level-2 sleep, which copies nothing to host RAM (look-alike)', async () => {
    const { sup, probes } = await twoDoubles(1000);
    held = true;
    const first = sup.sleep(id('a'), 1, probes);
    first.catch(() => undefined);
    await until(() => sup.get(id('a'))?.state === ShardState.SLEEPING, 'shard a admitted (SLEEPING)', 20_000);
    const b = await sup.sleep(id('b'), 2, probes);
    expect([b.state, b.error]).toEqual([ShardState.SLEEPING, '']);
    held = false;
    await first;
  });
});
