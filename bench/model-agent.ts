/**
 * The agent the warmth figures (14d) start from: the engine doubles, a store
 * fed from the bench's hub, and the bench model prefetched into it by the
 * control plane (a PrefetchModel, waited for to DONE).
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import type { ControlPlane } from '../src/control/control-plane.js';
import { type ModelPull, ModelPullState, PrefetchModelSchema } from '../src/gen/llmgw/v1/agent_pb.js';
import { StoreLayout } from '../src/models/store-layout.js';
import type { AgentDirs } from '../test/helpers/agent-config-yaml.js';
import { DOUBLE_ENGINES_YAML } from '../test/helpers/double-shards.js';
import { isRegister } from '../test/helpers/sim-shards.js';
import { spawnAgent } from './bench-support.js';
import { REPO } from './warm-start-model.js';

/** Starts the agent and prefetches the model; resolves with the paths of the model's blobs in the store. */
export async function agentWithModel(cp: ControlPlane, url: string, dirs: AgentDirs, o: { cacheDir: string; hubUrl: string; env?: Record<string, string> }): Promise<string[]> {
  spawnAgent(url, dirs, { extraYaml: `${DOUBLE_ENGINES_YAML}models:\n  cache_dir: ${o.cacheDir}\n  budget: 2GiB\n  hub:\n    endpoint: ${o.hubUrl}\n`, ...(o.env ? { env: o.env } : {}) });
  await cp.waitFor('node-a', isRegister, 30_000);
  const pulled = cp.waitFor('node-a', (m) => m.msg.case === 'modelPull' && m.msg.value.repo === REPO && [ModelPullState.DONE, ModelPullState.FAILED].includes(m.msg.value.state), 180_000);
  cp.send('node-a', { case: 'prefetch', value: create(PrefetchModelSchema, { repo: REPO, revision: 'main' }) });
  const pull = (await pulled).msg.value as ModelPull;
  if (pull.state !== ModelPullState.DONE) throw new Error(`the pull failed: ${pull.error}`);
  const blobs = join(new StoreLayout(o.cacheDir).repoDir(REPO), 'blobs');
  return readdirSync(blobs).map((n) => join(blobs, n));
}
