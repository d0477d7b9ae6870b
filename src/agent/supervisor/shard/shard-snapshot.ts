import type { ShardState, StartShard } from '../../../gen/llmgw/v1/agent_pb.js';
import type { ShardId } from '../../../lib/shard-id.js';
import type { EngineLoad } from '../probes/load-meter.js';
import type { GangFault } from './shard-machine.js';

/** A copy of one supervised shard as it is now; changing it changes nothing. */
export interface ShardSnapshot {
  shardId: ShardId;
  replicaId: string;
  spec: StartShard;
  state: ShardState;
  /** Process group leader; the group id equals it for both launchers. */
  pid: number;
  /** Taken over from a previous agent: not our child, so its exit status is unknown unless its systemd unit recorded it. */
  adopted: boolean;
  servesHttp: boolean;
  /** Why the shard failed or exited; empty otherwise. */
  error: string;
  /** When its engine was seen gone (this node's clock); absent while it may run. */
  endedAtMs?: number;
  /** 128+n when killed by signal n, as a shell reports it. */
  exitCode: number | null;
  /** Signal name, e.g. 'SIGKILL'. */
  signal: string | null;
  /** Last log lines, filled when the shard becomes FAILED or EXITED. */
  lastOutput: string[];
  startedAtMs: number;
  logPath: string;
  /**
   * The engine may still be running: false once its leader was seen gone or
   * a stop finished. A FAILED shard can still be running (not ready within
   * its startup timeout, left for the control plane to stop), and until it
   * is stopped it holds its GPUs.
   */
  running: boolean;
  /**
   * Drained (here, or before an agent restart, from the state file) and not
   * cancelled. An adopted shard still settling is reported DRAINING in
   * Register on its strength: traffic must not return to it.
   */
  drainRequested?: boolean;
  /** Asleep at this level (1 or 2; here, or before an agent restart, from the state file); 0 or absent when awake. */
  sleepLevel?: number;
  /** direct or systemd-run. */
  launcher?: string;
  /** The engine's systemd unit (llmgw-shard-<id>.service); '' with the direct launcher. */
  unit?: string;
  /** How it is watched, when an operator should know (an adopted engine whose unit systemd forgot, watched by pid). */
  note?: string;
  /** The content digest of the model it started from in the node's store (issue 51); absent when it did not, or was adopted. */
  modelDigest?: string;
  /** The engine's version as it answered at READY (shard-engine-facts.ts); absent before it was read or when it could not be. */
  engineVersion?: string;
  /** In flight and tokens per second at the health watch's latest /metrics read (ShardRunner.engineLoad); absent: unknown. */
  load?: EngineLoad;
  /** A peer rank of its gang broke or stalled (issue 40): ShardStatus.gang_break. */
  gangFault?: GangFault;
  /** UNHEALTHY because its progress counters stalled (stall-detector.ts): what its gang's peers report as the gang stalled. */
  stalled?: boolean;
}

export interface ShardTransition {
  shard: ShardSnapshot;
  from: ShardState;
  to: ShardState;
  /** Why, as the transition's log line says it ("answers /health"): what `ctl events` prints. */
  why?: string;
}
