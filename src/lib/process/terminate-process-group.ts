import { setTimeout as sleep } from 'node:timers/promises';
import { isNoSuchProcess } from '../errno.js';
import { readProcStat } from './proc-stat.js';
import { isRunningStat } from './process-identity.js';
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
  /**
   * Who gets the SIGTERM; SIGKILL always goes to the whole group. 'group'
   * (the default) for processes nobody can ask to shut down in order: an
   * orphan, the leftovers of a dead leader. 'leader' for an engine: its main
   * process (the group leader, pid = pgid) is asked alone and ends its own
   * workers as it exits. A SIGTERM to the group reaches the workers too, and
   * they die under the draining engine: vLLM's MultiprocExecutor workers turn
   * SIGTERM into SystemExit (vllm/v1/executor/multiproc_executor.py:857-873)
   * and the executor then fails the engine (:298-324); SGLang's schedulers
   * have no SIGTERM handler at all, and the watchdog then kills the tree
   * (sglang/srt/utils/watchdog.py:203-222). Either way every in-flight
   * request was aborted (review engine-fidelity §0 #2). When the leader is
   * no longer running there is no main process to ask: the group gets it.
   */
  sigtermTo?: 'group' | 'leader';
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
  signalOrGone(-pgid, sig);
}

function signalOrGone(target: number, sig: NodeJS.Signals): void {
  try {
    process.kill(target, sig);
  } catch (err) {
    // ESRCH: the process (or the whole group) went between our look and the signal.
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
 * SIGTERM (to the group, or to its leader alone: `sigtermTo`), up to
 * `graceMs` for the whole group to go, then SIGKILL to the whole group;
 * resolves only when no process of the group is running. The SIGKILL goes to
 * the group, never the leader alone: an engine's workers (and the CUDA
 * memory they hold) outlive a leader that is killed alone (EngineCore and TP
 * workers outlive a SIGKILLed vLLM API server, vLLM issue 55510).
 */
export async function terminateProcessGroup(opts: TerminateProcessGroupOptions): Promise<TerminateOutcome> {
  const { pgid, signal } = opts;
  const send = opts.sendSignal ?? signalGroup;
  signal?.throwIfAborted();
  if (listProcessGroup(pgid).length === 0) return 'gone';
  if (!opts.stillOurs()) return 'not-ours';
  // The leader is pid = pgid (groupStillOurs refuses any other group). A
  // zombie leader (exited, not yet reaped) cannot be asked anything either.
  if (opts.sigtermTo === 'leader' && isRunningStat(readProcStat(pgid))) signalOrGone(pgid, 'SIGTERM');
  else send(pgid, 'SIGTERM');
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
