import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { ShardState, type ShardStatus, type StartShard, StopShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { tempAgentDirs } from '../helpers/agent-process.js';
import { doubleStart } from '../helpers/double-shards.js';
import { freePort, until } from '../helpers/engine-processes.js';
import { runCli } from '../helpers/run-cli.js';
import { shardIs } from '../helpers/sim-shards.js';
import { bytes } from './fake-hub.js';
import { jsonFile, prefetch, startStoreAgent, useHub } from '../helpers/store-agent.js';

/*
 * Issue 51 items "GPU memory at READY" and "the content digest a shard
 * serves", on the real agent: the vLLM double holds --sim-gpu-memory on its
 * GPUs, which the fake nvidia-smi adds to the box's memory.used
 * (fake-gpu-usage.ts); the agent reads it at READY and reports it in
 * Inventory.warmth, ctl status and /metrics. A shard started from the store
 * shows the store's verified digest in ctl status; one that ran online none.
 */

const hub = useHub({
  'acme/mem': [
    jsonFile('config.json', '{"architectures":["LlamaForCausalLM"]}'),
    { path: 'model.safetensors', content: bytes(120_000, 31), lfs: true },
    jsonFile('tokenizer.json', '{"t":1}'),
    jsonFile('tokenizer_config.json', '{}'),
  ],
});

interface ShardJson {
  shardId: string;
  modelDigest?: string;
}
interface StatusJson {
  shards?: ShardJson[];
  inventory: {
    cachedModels?: { repo: string; complete?: boolean; contentDigest?: string }[];
    warmth?: { model: string; profile: string; gpuMemoryAtReadyMib?: number; gpuMemoryAtReadyGpus?: number }[];
  };
}

describe('GPU memory at READY and the content digest a shard serves (issue 51)', () => {
  it('learns the memory its shard holds at READY per profile, and shows the store digest of a shard started from the store, none for one that ran online', { timeout: 180_000 }, async () => {
    const dirs = tempAgentDirs('llmgw-ready-memory-');
    const usageDir = join(dirs.root, 'gpu-usage');
    const metricsPort = await freePort();
    const { plane } = await startStoreAgent(hub, dirs, { env: { LLMGW_FAKE_GPU_USAGE_DIR: usageDir }, yamlBefore: `metrics_addr: 127.0.0.1:${metricsPort}\n` });
    const status = async (): Promise<StatusJson> => JSON.parse((await runCli(['ctl', 'status', '--socket', dirs.socket, '--json'])).stdout) as StatusJson;
    const pull = async (include: string[]) => {
      await prefetch(plane, 'acme/mem', include);
    };
    const start = async (id: string, profile: string, gpus: number[], mib: number): Promise<ShardStatus> => {
      const s: StartShard = doubleStart('vllm', id, await freePort(), { model: 'acme/mem', gpus, args: ['--sim-read-weights', '--sim-gpu-memory', String(mib), '--sim-gpu-usage-dir', usageDir] });
      (s.profile as NonNullable<StartShard['profile']>).name = profile;
      const ended = plane.cp.waitFor('node-a', shardIs(id, ShardState.READY, ShardState.FAILED), 60_000);
      plane.cp.send('node-a', { case: 'start', value: s });
      return (await ended).msg.value as ShardStatus;
    };
    const stop = async (id: string) => {
      const stopped = plane.cp.waitFor('node-a', shardIs(id, ShardState.STOPPED), 30_000);
      plane.cp.send('node-a', { case: 'stop', value: create(StopShardSchema, { shardId: id }) });
      await stopped;
    };
    const warmthOf = async (profile: string) => (await status()).inventory.warmth?.find((w) => w.model === 'acme/mem' && w.profile === profile);

    // Online (only *.json in the store): no digest to show, and the memory is learned all the same.
    await pull(['*.json']);
    const online = await start('on-1', 'online', [0], 30_000);
    expect([online.state, online.error, online.modelDigest]).toEqual([ShardState.READY, '', '']);
    expect((await status()).shards?.find((s) => s.shardId === 'on-1')?.modelDigest ?? '').toBe('');
    expect((await runCli(['ctl', 'status', '--socket', dirs.socket])).stdout).not.toContain('on-1: serves model content');
    await stop('on-1');

    // From the store: its verified digest on the shard, in --json and in the human view.
    await pull(['*.safetensors', '*.json', 'tokenizer*']);
    const digest = (await status()).inventory.cachedModels?.find((c) => c.repo === 'acme/mem' && c.complete)?.contentDigest;
    expect(digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    const one = await start('g-1', 'one-gpu', [5], 70_000);
    expect([one.state, one.error, one.modelDigest]).toEqual([ShardState.READY, '', digest]);
    expect((await status()).shards?.find((s) => s.shardId === 'g-1')?.modelDigest).toBe(digest);
    expect((await runCli(['ctl', 'status', '--socket', dirs.socket])).stdout).toContain(`g-1: serves model content ${digest}`);
    // GPU 5 shows 3 MiB in the fake box's data set; the double adds its 70000.
    await until(async () => ((await warmthOf('one-gpu'))?.gpuMemoryAtReadyGpus ?? 0) > 0, 'the memory at READY learned', 30_000);
    expect(await warmthOf('one-gpu')).toMatchObject({ gpuMemoryAtReadyMib: 70_003, gpuMemoryAtReadyGpus: 1 });
    await stop('g-1');

    // Another profile on two GPUs (6: 0 MiB, 7: 17 MiB) holding 20000 each: its own figure, the first one's kept.
    const two = await start('g-2', 'two-gpus', [6, 7], 20_000);
    expect(two.state).toBe(ShardState.READY);
    await until(async () => ((await warmthOf('two-gpus'))?.gpuMemoryAtReadyGpus ?? 0) > 0, 'the second profile\'s memory at READY', 30_000);
    expect(await warmthOf('two-gpus')).toMatchObject({ gpuMemoryAtReadyMib: 40_017, gpuMemoryAtReadyGpus: 2 });
    expect(await warmthOf('one-gpu')).toMatchObject({ gpuMemoryAtReadyMib: 70_003 });
    expect(await warmthOf('online')).toMatchObject({ gpuMemoryAtReadyMib: 30_000, gpuMemoryAtReadyGpus: 1 });
    await stop('g-2');

    const human = (await runCli(['ctl', 'status', '--socket', dirs.socket])).stdout;
    expect(human).toMatch(/acme\/mem \(vllm, two-gpus\): .*; 40017 MiB on 2 GPUs at READY/);
    const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    expect(metrics).toContain(`llmgw_model_gpu_memory_at_ready_bytes{model="acme/mem",engine="vllm",profile="one-gpu"} ${70_003 * 1024 * 1024}`);
    expect(metrics).toContain(`llmgw_model_gpu_memory_at_ready_bytes{model="acme/mem",engine="vllm",profile="two-gpus"} ${40_017 * 1024 * 1024}`);
  });
});
