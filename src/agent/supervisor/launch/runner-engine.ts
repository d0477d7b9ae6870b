import type { ChildProcess } from 'node:child_process';
import type { EngineRecord } from '../../../lib/files/state-file.js';

/** One engine as launched or found: its record (what the state file stores), and what only this agent's life knows of it. */
export interface RunnerEngine {
  record: EngineRecord;
  /** Our own child: its exit event tells us at once, with the status. Absent for an adopted engine. */
  child?: ChildProcess;
  /** Taken over from a previous agent. */
  adopted: boolean;
  /** What an operator should know of how it is watched (ShardSnapshot.note); none when absent. */
  note?: string;
  /** The content digest of the model it reads from the store (ShardSnapshot.modelDigest). */
  modelDigest?: string;
  statePath: string;
}
