import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { afterAll, beforeAll } from 'vitest';
import { type AgentMessage, type ModelPull, ModelPullState, PrefetchModelSchema } from '../../src/gen/llmgw/v1/agent_pb.js';
import { type FakeFile, FakeHub, bytes, fakeRepo } from '../../src/sim/sim-hub.js';
import { type AgentDirs, type AgentProcess, startAgentProcess } from './agent-process.js';
import { DOUBLE_ENGINES_YAML } from './double-shards.js';
import { isRegister } from './sim-shards.js';
import { type StartedControlPlane, startControlPlane } from './start-control-plane.js';

/*
 * What the tests of the model store on the real agent share: a hub double
 * serving a checkpoint, a control plane and an agent whose store that hub
 * feeds, with the engine doubles, and a prefetch waited for to its end.
 */

/** A small JSON file as the hub serves one (not in LFS). */
export const jsonFile = (path: string, text: string): FakeFile => ({ path, content: Buffer.from(text), lfs: false });

/**
 * A Llama checkpoint as the hub has one: its config, its weights in two
 * safetensors shards of `shardBytes` made from `seeds` (each test's bytes its
 * own) with their index, `extra` files, then the tokenizer files vLLM reads
 * at start (tokenizer_config.json unless `tokenizerConfig` is false).
 */
export function llamaFiles(o: { shardBytes: [number, number]; seeds: [number, number]; extra?: FakeFile[]; tokenizerConfig?: boolean }): FakeFile[] {
  return [
    jsonFile('config.json', '{"architectures":["LlamaForCausalLM"]}'),
    { path: 'model-00001-of-00002.safetensors', content: bytes(o.shardBytes[0], o.seeds[0]), lfs: true },
    { path: 'model-00002-of-00002.safetensors', content: bytes(o.shardBytes[1], o.seeds[1]), lfs: true },
    jsonFile('model.safetensors.index.json', '{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}'),
    ...(o.extra ?? []),
    jsonFile('tokenizer.json', '{"t":1}'),
    ...(o.tokenizerConfig === false ? [] : [jsonFile('tokenizer_config.json', '{}')]),
  ];
}

/** The hub double serving `repos` (name → files), started before the file's tests and stopped after them. */
export function useHub(repos: Record<string, FakeFile[]>): FakeHub {
  const hub = new FakeHub();
  for (const [name, files] of Object.entries(repos)) hub.repos.set(name, fakeRepo(name, files));
  beforeAll(() => hub.start());
  afterAll(() => hub.stop());
  return hub;
}

/** The agent's `models:` section (its store in `cacheDir`, 64 MiB, fed by the hub at `hubUrl`), then `engines`. */
export function storeYaml(cacheDir: string, hubUrl: string, engines = DOUBLE_ENGINES_YAML): string {
  return `models:\n  cache_dir: ${cacheDir}\n  budget: 64MiB\n  hub:\n    endpoint: ${hubUrl}\n${engines}`;
}

export interface StoreAgent {
  plane: StartedControlPlane;
  dirs: AgentDirs;
  /** The store: <dirs.root>/models. */
  cacheDir: string;
  agent: AgentProcess;
  /** The agent's extra YAML, for an agent started again on the same directories. */
  yaml: string;
}

/**
 * A control plane and the real agent on `dirs`, registered, its store fed by
 * `hub`, with the engine doubles (`engines`: their section, changed). Inside
 * a test both end when it does; in beforeAll, end them with endAgentFixture.
 */
export async function startStoreAgent(
  hub: { url: string },
  dirs: AgentDirs,
  o: { engines?: string; env?: Record<string, string>; yamlBefore?: string } = {},
): Promise<StoreAgent> {
  const plane = await startControlPlane();
  const cacheDir = join(dirs.root, 'models');
  mkdirSync(cacheDir, { recursive: true });
  const yaml = `${o.yamlBefore ?? ''}${storeYaml(cacheDir, hub.url, o.engines)}`;
  const registered = plane.cp.waitFor('node-a', isRegister, 30_000);
  const agent = startAgentProcess({ server: plane.url, dirs, extraYaml: yaml, ...(o.env ? { env: o.env } : {}) });
  try {
    await registered;
  } catch (err) {
    // In beforeAll nothing else knows of them yet: an agent left running would outlive the file.
    await agent.stop();
    await plane.close();
    throw err;
  }
  return { plane, dirs, cacheDir, agent, yaml };
}

/** A pull of `repo` that ended, DONE or FAILED. */
export const pullEnded =
  (repo: string) =>
  (m: AgentMessage): boolean =>
    m.msg.case === 'modelPull' && m.msg.value.repo === repo && (m.msg.value.state === ModelPullState.DONE || m.msg.value.state === ModelPullState.FAILED);

/** Sends PrefetchModel of `repo` (only `include`, when given) to node-a and resolves with the end of its pull. */
export async function prefetch(plane: StartedControlPlane, repo: string, include?: string[], timeoutMs = 30_000): Promise<ModelPull> {
  const ended = plane.cp.waitFor('node-a', pullEnded(repo), timeoutMs);
  plane.cp.send('node-a', { case: 'prefetch', value: create(PrefetchModelSchema, { repo, ...(include ? { include } : {}) }) });
  return (await ended).msg.value as ModelPull;
}
