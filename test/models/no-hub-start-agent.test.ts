import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentMessage, type ModelPull, ModelPullState, PrefetchModelSchema, ShardState, type ShardStatus, type StartShard, StopShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { startAgentProcess, tempAgentDirs } from '../helpers/agent-process.js';
import { DOUBLE_ENGINES_YAML, doubleStart } from '../helpers/double-shards.js';
import { freePort } from '../helpers/engine-processes.js';
import { isRegister, shardIs } from '../helpers/sim-shards.js';
import { startControlPlane } from '../helpers/start-control-plane.js';
import { FakeHub, bytes, fakeRepo } from './fake-hub.js';

/*
 * Issue 51: a node without a hub (HF_HUB_OFFLINE=1 in engines.<name>.env, the
 * operator's word for an air-gapped node) refuses a start its store cannot
 * serve whole, in one line naming what is missing, and never starts it
 * online; the same node starts a model its store holds whole.
 */

const json = (s: string) => ({ content: Buffer.from(s), lfs: false });
const hub = new FakeHub();
hub.repos.set(
  'acme/llama',
  fakeRepo('acme/llama', [
    { path: 'config.json', ...json('{"architectures":["LlamaForCausalLM"]}') },
    { path: 'model-00001-of-00002.safetensors', content: bytes(60_000, 41), lfs: true },
    { path: 'model-00002-of-00002.safetensors', content: bytes(40_000, 42), lfs: true },
    { path: 'model.safetensors.index.json', ...json('{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}') },
    { path: 'tokenizer.json', ...json('{"t":1}') },
    { path: 'tokenizer_config.json', ...json('{}') },
  ]),
);

beforeAll(() => hub.start());
afterAll(() => hub.stop());

const pullEnds = (m: AgentMessage) => m.msg.case === 'modelPull' && (m.msg.value.state === ModelPullState.DONE || m.msg.value.state === ModelPullState.FAILED);

describe('a start on a node without a hub (issue 51)', () => {
  it('with a partial store is refused in one line naming the missing files, the hub never asked; with the store whole it starts', { timeout: 120_000 }, async () => {
    const plane = await startControlPlane();
    const dirs = tempAgentDirs('llmgw-no-hub-');
    const cacheDir = join(dirs.root, 'models');
    mkdirSync(cacheDir);
    const engines = DOUBLE_ENGINES_YAML.replace('    allow_sleep_mode: true\n', "    allow_sleep_mode: true\n    env:\n      HF_HUB_OFFLINE: '1'\n");
    const registered = plane.cp.waitFor('node-a', isRegister, 20_000);
    startAgentProcess({ server: plane.url, dirs, extraYaml: `models:\n  cache_dir: ${cacheDir}\n  budget: 64MiB\n  hub:\n    endpoint: ${hub.url}\n${engines}` });
    await registered;
    const pull = async (include: string[]) => {
      const ended = plane.cp.waitFor('node-a', pullEnds, 20_000);
      plane.cp.send('node-a', { case: 'prefetch', value: create(PrefetchModelSchema, { repo: 'acme/llama', include }) });
      expect(((await ended).msg.value as ModelPull).state).toBe(ModelPullState.DONE);
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
