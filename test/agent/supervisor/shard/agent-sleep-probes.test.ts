import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import type { AgentConfig } from '../../../../src/agent/config/agent-config.js';
import { type GpuMemorySampler, MIN_GPU_MEMORY_INTERVAL_MS } from '../../../../src/agent/health/gpu-memory-sampler.js';
import { agentSleepProbes } from '../../../../src/agent/supervisor/shard/agent-sleep-probes.js';
import { BASE_WAKE_TIMEOUT_MS } from '../../../../src/agent/supervisor/shard/wake-deadline.js';
import { type CachedModel, CachedModelSchema, InventorySchema, StartShardSchema } from '../../../../src/gen/llmgw/v1/agent_pb.js';
import type { MeasuredRate } from '../../../../src/models/modelled-warmth.js';

/*
 * What the agent judges a sleep and a wake by, wired from its parts: the GPU
 * memory sampler (a stand-in here: its readings are hardware's), the store's
 * models and the node's disk rate. The wake deadline's own arithmetic is
 * wake-deadline.test.ts's; here, that it is given the right inputs.
 */

const GIB = 1024 ** 3;

function probes(o: { heartbeatIntervalMs?: number; wakeTimeoutMs?: number; models?: CachedModel[]; disk?: MeasuredRate } = {}) {
  const sampler = { latest: () => [100, 200], readNow: async () => [101, 201], readAtMs: 1234 } as unknown as GpuMemorySampler;
  const config = {
    heartbeatIntervalMs: o.heartbeatIntervalMs ?? 500,
    supervisor: { wakeTimeoutMs: o.wakeTimeoutMs ?? 0 },
    discovery: { nvidiaSmi: '/nonexistent/nvidia-smi', timeoutMs: 1000 },
  } as unknown as AgentConfig;
  return agentSleepProbes({
    config,
    sampler,
    warmth: { diskRate: () => o.disk },
    models: { current: () => ({ cachedModels: o.models ?? [] }) },
    inventory: () => create(InventorySchema, {}),
    shards: () => [],
  });
}

const spec = (model: string, engine = 'vllm') => create(StartShardSchema, { shardId: 's1', profile: { engine, model } });
const stored = (repo: string, bytes: number, complete = true) => create(CachedModelSchema, { repo, bytes: BigInt(bytes), complete });

describe('agentSleepProbes', () => {
  it("reads the sampler's latest, fresh and timed readings", async () => {
    const p = probes();
    expect(p.gpuMemoryMib()).toEqual([100, 200]);
    expect(await p.readNow?.()).toEqual([101, 201]);
    expect(p.readAtMs?.()).toBe(1234);
  });

  it("waits for a first reading up to two of the sampler's intervals, the heartbeat's or its floor", () => {
    expect(probes({ heartbeatIntervalMs: 5000 }).firstReadingMs).toBe(10_000);
    expect(probes({ heartbeatIntervalMs: 10 }).firstReadingMs).toBe(2 * MIN_GPU_MEMORY_INTERVAL_MS);
  });

  it("gives a level-2 vLLM wake the store's bytes of the model at the disk rate measured", () => {
    const disk = { bytes: GIB, ms: 1000, atMs: 0 };
    const p = probes({ models: [stored('acme/big', 100 * GIB)], disk });
    const t = p.wakeTimeout?.(spec('acme/big'), 2, 1024);
    expect(t?.ms).toBe(BASE_WAKE_TIMEOUT_MS + 2 * 100 * 1000);
    expect(t?.why).toContain('the model in the store');
    expect(t?.why).toContain('the disk rate measured here');
  });

  it("falls back on what the GPUs held awake for a model the store has only in part, or not at all", () => {
    const p = probes({ models: [stored('acme/big', 100 * GIB, false)] });
    expect(p.wakeTimeout?.(spec('acme/big'), 2, 1024)?.why).toContain('what its GPUs held awake');
    expect(p.wakeTimeout?.(spec('acme/other'), 2, 1024)?.why).toContain('what its GPUs held awake');
  });

  it('keeps the fixed deadline for wakes that read nothing from disk, and the operator\'s when set', () => {
    const p = probes({ models: [stored('acme/big', 100 * GIB)] });
    expect(p.wakeTimeout?.(spec('acme/big'), 1, 1024)?.ms).toBe(BASE_WAKE_TIMEOUT_MS);
    expect(p.wakeTimeout?.(spec('acme/big', 'sglang'), 2, 1024)?.ms).toBe(BASE_WAKE_TIMEOUT_MS);
    expect(probes({ wakeTimeoutMs: 7000, models: [stored('acme/big', 100 * GIB)] }).wakeTimeout?.(spec('acme/big'), 2, 1024)).toEqual({ ms: 7000, why: 'supervisor.wake_timeout' });
  });

  it('holds one host-RAM ledger for every sleep of the node, and a wake GPU check', () => {
    const p = probes();
    const claim = p.hostRam?.claim('a', 100);
    expect(p.hostRam?.claim('b', 50).ahead()).toEqual({ mib: 100, shards: ['a'] });
    claim?.release();
    expect(typeof p.gpusTaken).toBe('function');
  });
});
