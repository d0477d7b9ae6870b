import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import type { ValidationContext } from '../../../src/agent/engines/engine.js';
import { GpuSchema, InventorySchema, type Profile, ProfileSchema, type StartShard, StartShardSchema } from '../../../src/gen/llmgw/v1/agent_pb.js';

type ShardFields = 'shardId' | 'replicaId' | 'rank' | 'nnodes' | 'gpuIndices' | 'hcas' | 'httpPort' | 'leaderAddr' | 'leaderPort' | 'pool' | 'fabric';
type ProfileFields = 'model' | 'servedModelName' | 'tensorParallelSize' | 'pipelineParallelSize' | 'args' | 'env' | 'minComputeCapability' | 'engine' | 'name' | 'sleepMode';

/** Eight healthy H100s, as the fake hgx-h100x8 data set describes them. */
export function h100Inventory() {
  return create(InventorySchema, {
    gpus: Array.from({ length: 8 }, (_, i) =>
      create(GpuSchema, { index: i, uuid: `GPU-${i}`, name: 'NVIDIA H100 80GB HBM3', computeCapability: '9.0', healthy: true }),
    ),
  });
}

export function shard(
  over: Partial<Pick<StartShard, ShardFields>> & { profile?: Partial<Pick<Profile, ProfileFields>> } = {},
): StartShard {
  const { profile, ...rest } = over;
  return create(StartShardSchema, {
    shardId: 's1',
    replicaId: 'r1',
    rank: 0,
    nnodes: 1,
    gpuIndices: [0, 1],
    httpPort: 8000,
    ...rest,
    profile: create(ProfileSchema, {
      name: 'llama-70b-tp2',
      engine: 'vllm',
      model: 'meta-llama/Llama-3.1-70B-Instruct',
      servedModelName: 'llama-70b',
      tensorParallelSize: 2,
      pipelineParallelSize: 1,
      ...profile,
    }),
  });
}

/**
 * This node as validation sees it. The agent is taken as unprivileged
 * (uid 1000) unless a test says otherwise: these tests judge profiles, and
 * the suite runs as root, where every engine without a user is refused
 * (engine-account.test.ts and the security suite prove that refusal).
 */
export function context(over: Partial<ValidationContext> = {}): ValidationContext {
  return { inventory: h100Inventory(), heldGpus: new Map(), foreignProcesses: [], isPortFree: async () => true, agentUid: 1000, ...over };
}

export interface FakeExecutables {
  dir: string;
  /** Absolute path of one fake. */
  path(name: string): string;
  /** Puts PATH back and removes the directory. */
  restore(): void;
}

/**
 * Executable scripts that exit 0, in a temp directory put first on this
 * process's PATH: the agent resolves bare engine names with its own PATH.
 */
export function fakeExecutablesOnPath(names: readonly string[]): FakeExecutables {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-fake-bin-'));
  for (const name of names) writeFileSync(join(dir, name), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
  const saved = process.env.PATH;
  process.env.PATH = `${dir}${delimiter}${saved ?? ''}`;
  return {
    dir,
    path: (name) => join(dir, name),
    restore: () => {
      process.env.PATH = saved;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
