import { lstatSync, mkdirSync, readFileSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentMessage, type ModelPull, ModelPullState, PrefetchModelSchema, ShardState, type ShardStatus, StopShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { readManifest } from '../../src/models/model-manifest.js';
import { StoreLayout } from '../../src/models/store-layout.js';
import { startAgentProcess, tempAgentDirs } from '../helpers/agent-process.js';
import { DOUBLE_ENGINES_YAML, doubleStart } from '../helpers/double-shards.js';
import { freePort, until } from '../helpers/engine-processes.js';
import { runCli } from '../helpers/run-cli.js';
import { isRegister, shardIs } from '../helpers/sim-shards.js';
import { startControlPlane } from '../helpers/start-control-plane.js';
import { FakeHub, bytes, fakeRepo } from './fake-hub.js';

/*
 * Issue 51 on the real agent with the store and both doubles, which fetch
 * online as their engines do (fake-weights.ts: a tokenizer repo's files, a
 * draft model's as a model's) and never a file whose pointer is already in
 * their hub cache: a start whose profile names a separate tokenizer repo or a
 * speculative draft model gets what the store holds of those too, linked into
 * the engine's own hub cache (feed-start-repos.ts), and fetches only what the
 * store lacks; a node without a hub refuses it naming every repo short.
 */

const json = (s: string) => ({ content: Buffer.from(s), lfs: false });
const hub = new FakeHub();
hub.repos.set(
  'acme/main',
  fakeRepo('acme/main', [
    { path: 'config.json', ...json('{"architectures":["LlamaForCausalLM"]}') },
    { path: 'model.safetensors', content: bytes(80_000, 61), lfs: true },
    { path: 'tokenizer.json', ...json('{"t":1}') },
  ]),
);
hub.repos.set(
  'acme/tok',
  fakeRepo('acme/tok', [
    { path: 'tokenizer.json', ...json('{"t":2}') },
    { path: 'tokenizer_config.json', ...json('{"tc":2}') },
    { path: 'special_tokens_map.json', ...json('{"s":2}') },
  ]),
);
hub.repos.set(
  'acme/draft',
  fakeRepo('acme/draft', [
    { path: 'config.json', ...json('{"architectures":["LlamaForCausalLM"],"draft":1}') },
    { path: 'model-00001-of-00002.safetensors', content: bytes(30_000, 62), lfs: true },
    { path: 'model-00002-of-00002.safetensors', content: bytes(20_000, 63), lfs: true },
    { path: 'model.safetensors.index.json', ...json('{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}') },
    { path: 'tokenizer.json', ...json('{"t":3}') },
  ]),
);
beforeAll(() => hub.start());
afterAll(() => hub.stop());

/** The GETs of file bytes from `repo` since request `since`, by path. */
const fetchedOf = (repo: string, since: number) =>
  hub.requests
    .slice(since)
    .filter((r) => r.url.startsWith(`/${repo}/resolve/`))
    .map((r) => r.url.split('/').slice(5).join('/'))
    .sort();

const pullEnds = (repo: string) => (m: AgentMessage) => m.msg.case === 'modelPull' && m.msg.value.repo === repo && (m.msg.value.state === ModelPullState.DONE || m.msg.value.state === ModelPullState.FAILED);

async function agentWithStore(tag: string, enginesYaml: string) {
  const plane = await startControlPlane();
  const dirs = tempAgentDirs(`llmgw-${tag}-`);
  const cacheDir = join(dirs.root, 'models');
  mkdirSync(cacheDir);
  const registered = plane.cp.waitFor('node-a', isRegister, 20_000);
  startAgentProcess({ server: plane.url, dirs, extraYaml: `models:\n  cache_dir: ${cacheDir}\n  budget: 64MiB\n  hub:\n    endpoint: ${hub.url}\n${enginesYaml}` });
  await registered;
  const pull = async (repo: string, include: string[]) => {
    const before = plane.cp.messages('node-a').filter(pullEnds(repo)).length;
    plane.cp.send('node-a', { case: 'prefetch', value: create(PrefetchModelSchema, { repo, include }) });
    await until(() => plane.cp.messages('node-a').filter(pullEnds(repo)).length > before, `the pull of ${repo}`, 20_000);
    expect((plane.cp.messages('node-a').filter(pullEnds(repo)).at(-1) as AgentMessage).msg.value as ModelPull).toMatchObject({ state: ModelPullState.DONE });
  };
  /** The store: the model whole, the tokenizer repo without tokenizer_config.json, the draft without its second shard. */
  const pullAll = async () => {
    await pull('acme/main', []);
    await pull('acme/tok', ['tokenizer.json', 'special_tokens_map.json']);
    await pull('acme/draft', ['*.json', 'model-00001-of-00002.safetensors']);
  };
  const start = async (id: string, engine: 'vllm' | 'sglang', args: string[]) => {
    const ended = plane.cp.waitFor('node-a', shardIs(id, ShardState.READY, ShardState.FAILED), 60_000);
    plane.cp.send('node-a', { case: 'start', value: doubleStart(engine, id, await freePort(), { model: 'acme/main', args }) });
    return (await ended).msg.value as ShardStatus;
  };
  const stop = async (id: string) => {
    const stopped = plane.cp.waitFor('node-a', shardIs(id, ShardState.STOPPED), 30_000);
    plane.cp.send('node-a', { case: 'stop', value: create(StopShardSchema, { shardId: id }) });
    await stopped;
  };
  const note = async (id: string) => (JSON.parse((await runCli(['ctl', 'status', '--socket', dirs.socket, '--json'])).stdout).shards as { shardId: string; note?: string }[]).find((x) => x.shardId === id)?.note ?? '';
  return { cacheDir, pullAll, start, stop, note };
}

const environOf = (pid: number) =>
  Object.fromEntries(
    readFileSync(`/proc/${pid}/environ`, 'utf8')
      .split('\0')
      .filter((kv) => kv.includes('='))
      .map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
  ) as Record<string, string>;

const vllmYaml = DOUBLE_ENGINES_YAML.replace('    allow_sleep_mode: true\n', "    allow_sleep_mode: true\n    allowed_args: ['--speculative-config']\n");
const vllmArgs = ['--sim-read-weights', '--tokenizer', 'acme/tok', '--speculative-config', '{"model":"acme/draft","num_speculative_tokens":3}'];
const sglangArgs = ['--sim-read-weights', '--tokenizer-path', 'acme/tok', '--speculative-algorithm', 'EAGLE', '--speculative-draft-model-path', 'acme/draft'];

describe('a start whose profile names a tokenizer repo and a draft model, fed from the store (issue 51)', () => {
  it('vLLM and SGLang each fetch only what the store lacks of the tokenizer and the draft; the rest is linked from the store', { timeout: 240_000 }, async () => {
    const a = await agentWithStore('fed-repos', vllmYaml);
    await a.pullAll();
    const layout = new StoreLayout(a.cacheDir);
    for (const [engine, args] of [
      ['vllm', vllmArgs],
      ['sglang', sglangArgs],
    ] as const) {
      const since = hub.requests.length;
      const st = await a.start(`${engine}-1`, engine, [...args]);
      expect([st.state, st.error]).toEqual([ShardState.READY, '']);
      const environ = environOf(st.pid);
      expect(environ).not.toHaveProperty('HF_HUB_OFFLINE');
      // Of the tokenizer repo only the file the store left out; of the draft only its missing shard; nothing of the model.
      expect(fetchedOf('acme/tok', since)).toEqual(['tokenizer_config.json']);
      expect(fetchedOf('acme/draft', since)).toEqual(['model-00002-of-00002.safetensors']);
      expect(fetchedOf('acme/main', since)).toEqual([]);
      const note = await a.note(`${engine}-1`);
      expect(note).toMatch(/--tokenizer(-path)? acme\/tok@main was pulled with --include/);
      expect(note).toMatch(/3 files of acme\/main linked from the store into its hub cache; 2 files of --tokenizer(-path)? acme\/tok linked from the store into its hub cache; 4 files of --speculative-(config|draft-model-path) acme\/draft linked from the store into its hub cache, the rest fetched$/);
      // What was linked points at the store's own blob.
      const manifest = await readManifest(layout, 'acme/draft');
      const commit = manifest?.refs.main as string;
      const etag = manifest?.snapshots[commit]?.files.find((f) => f.path === 'model-00001-of-00002.safetensors')?.etag as string;
      const pointer = join(environ.HF_HUB_CACHE as string, 'models--acme--draft', 'snapshots', commit, 'model-00001-of-00002.safetensors');
      expect(lstatSync(pointer).isSymbolicLink()).toBe(true);
      expect(readlinkSync(pointer)).toBe(layout.blobPath('acme/draft', etag));
      await a.stop(`${engine}-1`);
      // The look-alike: the next start of that engine finds the rest in its own cache and fetches nothing at all.
      const again = hub.requests.length;
      const st2 = await a.start(`${engine}-2`, engine, [...args]);
      expect([st2.state, fetchedOf('acme/tok', again), fetchedOf('acme/draft', again)]).toEqual([ShardState.READY, [], []]);
      await a.stop(`${engine}-2`);
    }
  });

  it('a node without a hub refuses it in one line naming every repo short and each pull to make, the hub never asked', { timeout: 120_000 }, async () => {
    const a = await agentWithStore('no-hub-repos', vllmYaml.replace('    allow_sleep_mode: true\n', "    allow_sleep_mode: true\n    env:\n      HF_HUB_OFFLINE: '1'\n"));
    await a.pullAll();
    const since = hub.requests.length;
    const refused = await a.start('n1', 'vllm', [...vllmArgs]);
    expect(refused.state).toBe(ShardState.FAILED);
    expect(refused.pid).toBe(0);
    expect(refused.error).not.toContain('\n');
    expect(refused.error).toMatch(/^shard n1: the node has no hub \(HF_HUB_OFFLINE=1 in the engine's environment\) and --tokenizer acme\/tok@main was pulled with --include .*, which left out tokenizer_config\.json; --speculative-config acme\/draft@main was pulled with --include .*, which left out model-00002-of-00002\.safetensors; pull what is missing \(llmgw models pull acme\/tok; llmgw models pull acme\/draft\) and start it again$/);
    expect(hub.requests.length).toBe(since);
  });
});
