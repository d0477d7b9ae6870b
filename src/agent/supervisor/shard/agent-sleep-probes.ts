import type { CachedModel, Inventory } from '../../../gen/llmgw/v1/agent_pb.js';
import type { MeasuredRate } from '../../../models/modelled-warmth.js';
import type { AgentConfig } from '../../config/agent-config.js';
import type { NvmlLibrary } from '../../discovery/nvml/nvml-library.js';
import { type GpuMemorySampler, MIN_GPU_MEMORY_INTERVAL_MS } from '../../health/gpu-memory-sampler.js';
import { type SleepProbes, shardGpuMib } from './shard-sleep.js';
import type { ShardSnapshot } from './shard-snapshot.js';
import { HostRamLedger } from './host-ram-ledger.js';
import { wakeDeadline } from './wake-deadline.js';
import { wakeGpuCheck } from './wake-gpu-check.js';

export interface AgentSleepProbesOptions {
  config: AgentConfig;
  sampler: GpuMemorySampler;
  /** The node's measured disk rate (the agent's WarmthLedger): a level-2 wake reads the weights again. */
  warmth: { diskRate(): MeasuredRate | undefined };
  /** The node's model store (the agent's NodeModels): the model's bytes, what that read is. */
  models: { current(): { cachedModels: readonly CachedModel[] } };
  inventory: () => Inventory;
  shards: () => ShardSnapshot[];
  /** The NVML the agent keeps open, when it does: a wake's process listing is then in-process. */
  nvml?: NvmlLibrary;
}

/**
 * What the agent judges a sleep and a wake by. A sleep by the GPU readings
 * heartbeats carry (issue 30), from a reading taken after it was asked: it
 * waits up to two of the sampler's intervals for one. Fresh reads on demand
 * (issue 36 item 8) see the engine's release or resume as it happens, not
 * at the sampler's next tick a second later. A wake's deadline from the
 * model's bytes and the node's disk rate, and its GPUs free of processes no
 * shard owns (issue 47 item 5).
 */
export function agentSleepProbes(o: AgentSleepProbesOptions): SleepProbes {
  const c = o.config;
  return {
    gpuMemoryMib: () => o.sampler.latest(),
    readNow: () => o.sampler.readNow(),
    readAtMs: () => o.sampler.readAtMs,
    firstReadingMs: 2 * Math.max(c.heartbeatIntervalMs, MIN_GPU_MEMORY_INTERVAL_MS),
    wakeTimeout: (spec, level, awakeMib) => {
      const model = spec.profile?.model ?? '';
      const stored = o.models.current().cachedModels.find((m) => m.repo === model && m.complete);
      return wakeDeadline({ engine: spec.profile?.engine ?? '', level, awakeMib, modelBytes: Number(stored?.bytes ?? 0n), disk: o.warmth.diskRate(), configuredMs: c.supervisor.wakeTimeoutMs });
    },
    // One for the node: concurrent sleeps are admitted against host RAM together (security review 4, F8).
    hostRam: new HostRamLedger(),
    gpusTaken: wakeGpuCheck({ nvml: o.nvml, nvidiaSmi: c.discovery.nvidiaSmi, timeoutMs: c.discovery.timeoutMs, inventory: o.inventory, shards: o.shards }),
  };
}

/**
 * The GPU memory a READY shard holds, for the warmth ledger (issue 51): its
 * GPUs' readings taken now (NVML in-process, else one nvidia-smi), else the
 * sampler's last, summed over them; undefined when a GPU has no reading.
 */
export function readShardGpuMib(sampler: Pick<GpuMemorySampler, 'readNow' | 'latest'>): (gpus: readonly number[]) => Promise<number | undefined> {
  return async (gpus) => shardGpuMib(await sampler.readNow().catch(() => sampler.latest()), gpus);
}
