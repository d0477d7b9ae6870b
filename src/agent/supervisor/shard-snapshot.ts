import type { ShardState, StartShard } from '../../gen/llmgw/v1/agent_pb.js';

/** A copy of one supervised shard as it is now; changing it changes nothing. */
export interface ShardSnapshot {
  shardId: string;
  replicaId: string;
  spec: StartShard;
  state: ShardState;
  /** Process group leader; the group id equals it for both launchers. */
  pid: number;
  /** Taken over from a previous agent: not our child, so its exit status is unknown. */
  adopted: boolean;
  servesHttp: boolean;
  /** Why the shard failed or exited; empty otherwise. */
  error: string;
  /** 128+n when killed by signal n, as a shell reports it. */
  exitCode: number | null;
  /** Signal name, e.g. 'SIGKILL'. */
  signal: string | null;
  /** Last log lines, filled when the shard becomes FAILED or EXITED. */
  lastOutput: string[];
  startedAtMs: number;
  logPath: string;
}

export interface ShardTransition {
  shard: ShardSnapshot;
  from: ShardState;
  to: ShardState;
}
