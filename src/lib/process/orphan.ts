import type { StartShard } from '../../gen/llmgw/v1/agent_pb.js';
import type { LoggingProcess } from './process-table.js';
import type { ShardId } from '../shard-id.js';

/** A shard a previous agent left on disk or running: judged by judgeOrphan. */
export interface Orphan {
  shardId: ShardId;
  /** The recorded pid when it is still ours, else a live process found holding the shard's log, else 0. */
  pid: number;
  /** The recorded process group when the state file's identity still matches its leader; 0 otherwise. */
  pgid: number;
  /** Some process of the shard is still running. */
  alive: boolean;
  /** State file readable, valid, and its identity (start time + boot id) matches the live pid. */
  identified: boolean;
  /** Why it is not identified, or why it counts as dead; empty when identified. */
  reason: string;
  spec?: StartShard;
  replicaId: string;
  servesHttp: boolean;
  /** Processes writing the shard's log when judged: whatever the state file says, these are the shard's. */
  holders: LoggingProcess[];
  /** A dead engine's exit status, when its systemd unit recorded one (128+n for signal n). */
  exitCode?: number;
  /** The signal that ended it, when its systemd unit recorded one. */
  exitSignal?: string;
  /**
   * Identified by pid, start time and boot id, but its recorded unit is not
   * what systemd describes now (forgotten after a daemon-reload, another
   * run of the name): it is kept, watched and stopped by pid, and this says
   * so (the shard's note in ctl status). Absent when the unit is the one recorded.
   */
  unitNote?: string;
}
