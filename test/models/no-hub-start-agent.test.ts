import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { ModelPullState, ShardState, type ShardStatus, type StartShard, StopShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { tempAgentDirs } from '../helpers/agent-process.js';
import { DOUBLE_ENGINES_YAML, doubleStart } from '../helpers/double-shards.js';
import { freePort } from '../helpers/engine-processes.js';
import { shardIs } from '../helpers/sim-shards.js';
import { llamaFiles, prefetch, startStoreAgent, useHub } from '../helpers/store-agent.js';

/*
 * Issue 51: a node without a hub (HF_HUB_OFFLINE=1 in engines.<name>.env, the
 * operator's word for an air-gapped node) refuses a start its store cannot
 * serve whole, in one line naming what is missing, and never starts it
 * online; the same node starts a model its store holds whole.
 */

const hub = useHub({ 'acme/llama': llamaFiles({ shardBytes: [60_000, 40_000], seeds: [41, 42] }) });

describe('a start on a node without a hub (issue 51)', () => {
  it('with a partial store is refused in one line naming the missing files, the hub never asked; with the store whole it starts', { timeout: 120_000 }, async () => {
    const engines = DOUBLE_ENGINES_YAML.replace('    allow_sleep_mode: true\n', "    allow_sleep_mode: true\n    env:\n      HF_HUB_OFFLINE: '1'\n");
    const { plane } = await startStoreAgent(hub, tempAgentDirs('llmgw-no-hub-'), { engines });
    const pull = async (include: string[]) => {
      expect((await prefetch(plane, 'acme/llama', include)).state).toBe(ModelPullState.DONE);
    };
    const run = async (id: string): Promise<ShardStatus> => {
      const s: StartShard = doubleStart('vllm', id, await freePort(), { model: 'acme/llama', args: ['--sim-read-weights'] });
      const ended = plane.cp.waitFor('node-a', shardIs(id, ShardState.READY, ShardState.FAILED), 30_000);
      plane.cp.send('node-a', { case: 'start', value: s });
      return (await ended).msg.value as ShardStatus;
    };

    await pull(['*.json']);
    const asked = hub.requests.length;
    const refused = await run('p1');
    expect(refused.state).toBe(ShardState.FAILED);
    expect(refused.pid).toBe(0);
    expect(refused.error).not.toContain('\n');
    expect(refused.error).toMatch(/^shard p1: the node has no hub \(HF_HUB_OFFLINE=1 in the engine's environment\) and acme\/llama@main was pulled with --include \*\.json, which left out model-00001-of-00002\.safetensors, model-00002-of-00002\.safetensors.*; pull what is missing \(llmgw models pull acme\/llama\)/);
    expect(hub.requests.length).toBe(asked);

    // Look-alike: the same node, its store whole, starts offline.
    await pull(['*.safetensors', '*.json', 'tokenizer*']);
    const whole = await run('p2');
    expect([whole.state, whole.error]).toEqual([ShardState.READY, '']);
    const stopped = plane.cp.waitFor('node-a', shardIs('p2', ShardState.STOPPED), 20_000);
    plane.cp.send('node-a', { case: 'stop', value: create(StopShardSchema, { shardId: 'p2' }) });
    await stopped;
  });
});
