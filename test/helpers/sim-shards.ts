import { create } from '@bufbuild/protobuf';
import { type AgentMessage, type ShardState, type StartShard, StartShardSchema } from '../../src/gen/llmgw/v1/agent_pb.js';

/*
 * Sim shards as the control plane would start them, and the predicates tests
 * wait on. Free of vitest, so that the benchmarks and the fault campaign's
 * soak driver (plain tsx, no test runner) build the very same messages.
 */

/**
 * The GPUs of the fake 8-GPU box (hgx-h100x8) a shard can start on: 3 and 4
 * carry memory no listed process holds, and a start on them is refused
 * (foreign memory) before anything else is looked at.
 */
export const FREE_FAKE_GPUS: readonly number[] = [0, 1, 2, 5, 6, 7];

export interface SimStartOptions {
  /** The sim engine's arguments; ['--load-time', '200ms'] by default. */
  args?: string[];
  /** The one GPU the shard runs on; 0 by default. */
  gpu?: number;
}

/** A StartShard for a one-GPU sim shard serving model 'm' on `port`. */
export function simStart(shardId: string, port: number, opts: SimStartOptions = {}): StartShard {
  return create(StartShardSchema, {
    shardId,
    replicaId: `r-${shardId}`,
    rank: 0,
    nnodes: 1,
    gpuIndices: [opts.gpu ?? 0],
    httpPort: port,
    profile: {
      name: 'sim-small',
      engine: 'sim',
      model: 'sim/m',
      servedModelName: 'm',
      tensorParallelSize: 1,
      args: opts.args ?? ['--load-time', '200ms'],
    },
  });
}

export const isRegister = (m: AgentMessage): boolean => m.msg.case === 'register';

/** A status of shard `id` in one of `states`. */
export const shardIs =
  (id: string, ...states: ShardState[]) =>
  (m: AgentMessage): boolean =>
    m.msg.case === 'shard' && m.msg.value.shardId === id && states.includes(m.msg.value.state);
