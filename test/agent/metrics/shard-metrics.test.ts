import { create } from '@bufbuild/protobuf';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { ShardMetrics } from '../../../src/agent/metrics/shard-metrics.js';
import type { EngineLoad } from '../../../src/agent/supervisor/probes/load-meter.js';
import type { ShardSnapshot, ShardTransition } from '../../../src/agent/supervisor/shard/shard-snapshot.js';
import { ShardState, StartShardSchema } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { shardSnapshot } from '../../helpers/shard-snapshot.js';

function shard(id: string, state: ShardState, load: EngineLoad | undefined): ShardSnapshot {
  return shardSnapshot(id, { state, load, spec: create(StartShardSchema, { shardId: id, gpuIndices: [0, 1], profile: { engine: 'vllm', model: 'm' } }) });
}

describe('ShardMetrics', () => {
  it("exports each serving shard's token rate as the agent last read it, with the shard labels, and nothing for one it does not know", async () => {
    const registry = new Registry();
    let shards = [
      shard('busy', ShardState.READY, { inFlight: 2, tokensPerSecond: 412.5 }),
      shard('unknown', ShardState.READY, { inFlight: undefined, tokensPerSecond: undefined }),
      shard('going', ShardState.STOPPING, { inFlight: 0, tokensPerSecond: 0 }),
    ];
    let inFlightReads = 0;
    new ShardMetrics(registry, {
      shards: () => shards,
      onTransition: () => {},
      inFlight: async () => {
        inFlightReads++;
        return undefined;
      },
    });
    const gauge = async () => (await registry.getSingleMetric('llmgw_shard_generation_tokens_per_second')?.get())?.values ?? [];
    expect(await gauge()).toEqual([{ labels: { shard: 'busy', replica: 'r-busy', model: 'm', engine: 'vllm', gpus: '0,1' }, value: 412.5 }]);
    // The rate is the agent's reading: scraping it alone asks no engine anything.
    expect(inFlightReads).toBe(0);
    // A shard the supervisor forgot leaves no series behind.
    shards = [];
    expect(await gauge()).toEqual([]);
  });

  it('reports a sleeping shard as SLEEPING on llmgw_shard_state (the metrics once kept their own list of states, without it)', async () => {
    const registry = new Registry();
    new ShardMetrics(registry, { shards: () => [shard('nap', ShardState.SLEEPING, undefined)], onTransition: () => {}, inFlight: async () => undefined });
    const values = (await registry.getSingleMetric('llmgw_shard_state')?.get())?.values ?? [];
    const on = values.filter((v) => v.value === 1).map((v) => v.labels.state);
    expect(on).toEqual(['SLEEPING']);
    expect(new Set(values.map((v) => v.labels.state))).toEqual(new Set(['STARTING', 'READY', 'UNHEALTHY', 'DRAINING', 'SLEEPING', 'STOPPING', 'STOPPED', 'FAILED', 'EXITED']));
  });

  it('counts launches per replica across the new shard id of each retry, which llmgw_shard_restarts_total cannot see (walkthrough 3)', async () => {
    const registry = new Registry();
    let shards: ShardSnapshot[] = [];
    let tell: (t: ShardTransition) => void = () => {};
    new ShardMetrics(registry, { shards: () => shards, onTransition: (l) => (tell = l), inFlight: async () => undefined });
    const launch = (id: string, adopted = false) => {
      const s = { ...shard(id, ShardState.STARTING, undefined), replicaId: 'r-tiny', adopted };
      shards = [...shards, s];
      tell({ shard: s, from: ShardState.UNSPECIFIED, to: ShardState.STARTING, why: 'launched' });
    };
    const value = async (name: string) => (await registry.getSingleMetric(name)?.get())?.values ?? [];
    // As the reference control plane retries: each generation a new shard id.
    launch('tiny-g1-r0');
    launch('tiny-g2-r0');
    launch('tiny-g3-r0');
    expect(await value('llmgw_replica_launches_total')).toEqual([{ labels: { replica: 'r-tiny', model: 'm', engine: 'vllm' }, value: 3 }]);
    expect((await value('llmgw_shard_restarts_total')).map((v) => v.value)).toEqual([0, 0, 0]);
    // An adoption is no launch.
    launch('tiny-g3-r0-adopted', true);
    expect((await value('llmgw_replica_launches_total'))[0]?.value).toBe(3);
    // The replica gone from the node: its series goes too.
    shards = [];
    expect(await value('llmgw_replica_launches_total')).toEqual([]);
  });
});
