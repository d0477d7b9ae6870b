import type { ChildProcess } from 'node:child_process';
import type { Launcher } from '../../config/agent-config.js';
import type { StartShard } from '../../../gen/llmgw/v1/agent_pb.js';
import type { ProcessIdentity } from '../../../lib/process/process-identity.js';
import type { EngineWatch } from '../../../lib/engine-watch.js';
import type { EngineUnit } from '../launch/engine-unit.js';

/** One engine as launched or found: what the runner needs to watch, settle and stop it. */
export interface RunnerEngine {
  spec: StartShard;
  replicaId: string;
  pid: number;
  pgid: number;
  identity: ProcessIdentity;
  /** Our own child: its exit event tells us at once, with the status. Absent for an adopted engine. */
  child?: ChildProcess;
  /** How it was launched; direct when not said (state files of version one). */
  launcher?: Launcher;
  /** Its systemd unit (systemd-run): its cgroup is what a stop ends, and systemd records its exit status. */
  unit?: EngineUnit;
  adopted: boolean;
  /** What an operator should know of how it is watched (ShardSnapshot.note); none when absent. */
  note?: string;
  servesHttp: boolean;
  /** How the rank is probed, and the series a drain and stall detection read. */
  watch: EngineWatch;
  /** A drain recorded in the state file by a previous agent: the shard settles to DRAINING, not READY. */
  drainRequested?: boolean;
  startedAtMs: number;
  logPath: string;
  statePath: string;
}
