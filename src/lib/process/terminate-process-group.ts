import { setTimeout as sleep } from 'node:timers/promises';
import { isNoSuchProcess } from '../errno.js';
import { listProcessGroup } from './process-table.js';

/** How often the group is looked at while waiting for it to go. */
export const GROUP_POLL_MS = 50;

export interface TerminateProcessGroupOptions {
  pgid: number;
  /**
   * Asked right before every signal. False means the group is no longer the
   * one we launched (its leader's pid now names another process), and nothing
   * is sent: signalling a reused pid kills an innocent process.
   */
  stillOurs: () => boolean;
  /** Time between SIGTERM and SIGKILL. */
  graceMs: number;
  /** Aborts the wait (the processes may then still be running). */
  signal?: AbortSignal;
  /**
   * How long to wait for the group to go after SIGKILL; no limit when
   * omitted. A process in uninterruptible sleep (a hung GPU driver call)
   * outlives SIGKILL for as long as the call hangs: a caller that must not
   * hang with it (start-up recovery, before the agent registers) sets a
   * limit and gets 'unkillable'.
   */
  killWaitMs?: number;
  /** Sends `sig` to process group `pgid`; process.kill(-pgid) unless a test intercepts it. */
  sendSignal?: (pgid: number, sig: NodeJS.Signals) => void;
}

export type TerminateOutcome =
  /** Nothing of the group was running. */
  | 'gone'
  /** Exited within the grace period after SIGTERM. */
  | 'terminated'
  /** Needed SIGKILL. */
  | 'killed'
  /** Refused: the group is no longer ours. */
  | 'not-ours'
  /** Still running killWaitMs after SIGKILL: it may hold GPU memory until it really goes. */
  | 'unkillable';

function signalGroup(pgid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(-pgid, sig);
  } catch (err) {
    // ESRCH: the whole group went between our look and the signal.
    if (!isNoSuchProcess(err)) throw err;
  }
}

async function waitGone(pgid: number, deadlineMs: number, signal?: AbortSignal): Promise<boolean> {
  for (;;) {
    if (listProcessGroup(pgid).length === 0) return true;
    if (Date.now() >= deadlineMs) return false;
    await sleep(Math.min(GROUP_POLL_MS, Math.max(1, deadlineMs - Date.now())), undefined, { signal });
  }
}

/**
 * SIGTERM to the whole process group, `graceMs`, then SIGKILL; resolves only
 * when no process of the group is running. The group, not the leader: an
 * engine's workers (and the CUDA memory they hold) outlive a leader that is
 * signalled alone.
 */
export async function terminateProcessGroup(opts: TerminateProcessGroupOptions): Promise<TerminateOutcome> {
  const { pgid, signal } = opts;
  const send = opts.sendSignal ?? signalGroup;
  signal?.throwIfAborted();
  if (listProcessGroup(pgid).length === 0) return 'gone';
  if (!opts.stillOurs()) return 'not-ours';
  send(pgid, 'SIGTERM');
  if (await waitGone(pgid, Date.now() + opts.graceMs, signal)) return 'terminated';
  if (!opts.stillOurs()) return 'not-ours';
  send(pgid, 'SIGKILL');
  // No limit by default: SIGKILL cannot be ignored, and a process in
  // uninterruptible sleep (a GPU driver call) still holds its memory until it
  // is really gone. Reporting STOPPED before that would let the GPUs be
  // handed out twice. A caller with a limit hears 'unkillable' instead.
  const gone = await waitGone(pgid, Date.now() + (opts.killWaitMs ?? Number.POSITIVE_INFINITY), signal);
  return gone ? 'killed' : 'unkillable';
}
