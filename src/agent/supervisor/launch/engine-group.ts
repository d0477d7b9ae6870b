import type { ChildProcess } from 'node:child_process';
import { errorMessage } from '../../../lib/errors.js';
import type { Logger } from '../../../lib/logger.js';
import { readProcStat } from '../../../lib/process/proc-stat.js';
import { type ProcessIdentity, readBootId } from '../../../lib/process/process-identity.js';
import { listProcessGroup } from '../../../lib/process/process-table.js';
import { terminateProcessGroup } from '../../../lib/process/terminate-process-group.js';

/** An engine's process group, as the runner knows it. */
export interface EngineGroup {
  pid: number;
  pgid: number;
  identity: ProcessIdentity;
  /** Present when the engine leader is our own child. */
  child?: ChildProcess;
}

/**
 * Whether signalling the group still reaches the engine we launched. Our
 * unreaped child cannot have had its pid reused. Otherwise the leader's start
 * time must match; and when the leader is gone entirely, Linux keeps its pid
 * reserved for as long as it names a live process group, so surviving
 * members are still that group.
 */
export function groupStillOurs(g: EngineGroup): boolean {
  // Engines lead their own group; anything else was not launched by us (a
  // forged or corrupt record), and its pgid is nobody's to signal.
  if (g.pgid !== g.pid) return false;
  if (g.child && g.child.exitCode === null && g.child.signalCode === null) return true;
  if (g.identity.bootId !== readBootId()) return false;
  const stat = readProcStat(g.pid);
  if (!stat) return true;
  // Before every group signal: the leader must still lead the recorded group.
  return stat.startTime === g.identity.startTime && stat.pgrp === g.pgid;
}

/**
 * The leader is gone, but its process group may not be: workers of a
 * crashed engine, or the server a launcher forked before it exited. They
 * are ended before FAILED or EXITED is reported, because those states tell
 * the control plane the GPUs are free: left running, they held GPU memory
 * and the port while a new shard was placed on them (found by the fault
 * campaign, engine-fork-and-exit). Never throws: a failure is logged.
 */
export async function reapLeftovers(g: EngineGroup, opts: { graceMs: number; signal: AbortSignal; log: Logger }): Promise<void> {
  if (listProcessGroup(g.pgid).length === 0) return;
  try {
    const outcome = await terminateProcessGroup({ pgid: g.pgid, stillOurs: () => groupStillOurs(g), graceMs: opts.graceMs, signal: opts.signal });
    opts.log.warn({ pid: g.pid, outcome }, 'engine leader gone; ended the rest of its process group');
  } catch (err) {
    opts.log.warn({ pid: g.pid, err: errorMessage(err) }, "ending the rest of a dead engine's process group failed");
  }
}
