import { setTimeout as sleep } from 'node:timers/promises';
import { failure } from '../../../lib/errors.js';
import type { TerminateOutcome } from '../../../lib/process/terminate-process-group.js';
import { type UnitStatus, readUnitStatus } from '../../../lib/systemd/read-unit-status.js';
import { runSystemctl } from '../../../lib/systemd/run-systemctl.js';
import { unitCgroupProcs } from '../../../lib/systemd/unit-cgroup-procs.js';
import { type EngineUnit, UNIT_ENDED_STATES, UNIT_POLL_MS, isSameRun } from './engine-unit.js';

/**
 * Ends every process of the unit's cgroup: SIGTERM to the unit's main
 * process alone (the engine, which drains and ends its own workers), up to
 * `graceMs` for the main process to be gone and nothing of the unit to run,
 * then SIGKILL to all of the cgroup, then a stop that leaves the unit
 * inactive. The signals are sent with `systemctl kill --kill-whom=`, never
 * left to the unit's KillMode: a unit started by an agent before KillMode=mixed
 * has control-group, whose stop SIGTERMs every worker with the engine and
 * aborts its requests (see TerminateProcessGroupOptions.sigtermTo). The
 * cgroup, not the process group, gets the SIGKILL: a worker that setsid()ed
 * out of the engine's group (vLLM's spawned workers can) is still in it, and
 * a stop that signalled only the group once left such workers holding GPU
 * memory. A unit whose main process has already gone (RemainAfterExit keeps
 * it `active (exited)`, with whatever the engine left) has no one to ask:
 * its leftovers get the SIGTERM. Resolves when systemd says nothing of the
 * unit runs, and unloads a failed unit so the shard id can be started
 * again. Never touches another run. With `killWaitMs`, a unit still running
 * that long after SIGKILL is 'unkillable' (see terminateProcessGroup).
 */
export async function stopEngineUnit(unit: EngineUnit, opts: { graceMs: number; signal?: AbortSignal; killWaitMs?: number }): Promise<TerminateOutcome> {
  const { signal } = opts;
  signal?.throwIfAborted();
  const first = await readUnitStatus(unit.name, signal);
  if (!isSameRun(first, unit)) return first.LoadState === 'loaded' ? 'not-ours' : 'gone';
  if (UNIT_ENDED_STATES.has(first.ActiveState)) {
    await forgetUnit(unit, signal);
    return 'gone';
  }
  let outcome: TerminateOutcome = 'terminated';
  await askToEnd(unit, first, signal);
  if (!(await waitDrained(unit, Date.now() + opts.graceMs, signal))) {
    const again = await readUnitStatus(unit.name, signal);
    if (!isSameRun(again, unit)) return 'terminated';
    outcome = 'killed';
    await systemctlOrThrow(['kill', '--kill-whom=all', '--signal=SIGKILL', '--', unit.name], signal);
  }
  // Nothing of the engine runs any more (or it has its SIGKILL), but the
  // unit may still be `active (exited)`: the stop ends it. With nothing left
  // in its cgroup there is nothing for the stop to signal.
  const now = await readUnitStatus(unit.name, signal);
  if (isSameRun(now, unit) && !UNIT_ENDED_STATES.has(now.ActiveState)) await systemctlOrThrow(['stop', '--no-block', '--', unit.name], signal);
  // No limit by default, as for a process group: a process in
  // uninterruptible sleep (a GPU driver call) holds its memory until it is
  // really gone. Recovery gives one (killWaitMs): a stuck unit there is
  // reported 'unkillable', left loaded, and recovery goes on.
  if (!(await waitEnded(unit, Date.now() + (opts.killWaitMs ?? Number.POSITIVE_INFINITY), signal))) return 'unkillable';
  await forgetUnit(unit, signal);
  return outcome;
}

/**
 * The SIGTERM of a stop: to the main process when there is one, to every
 * process of the unit when there is not (its leftovers). `--kill-whom=main`
 * exits 1 ("No main process to kill") when the main process went between
 * the read and the signal; its leftovers are asked then.
 */
async function askToEnd(unit: EngineUnit, status: UnitStatus, signal?: AbortSignal): Promise<void> {
  if (Number(status.MainPID) > 0) {
    const r = await runSystemctl(['kill', '--kill-whom=main', '--signal=SIGTERM', '--', unit.name], { signal });
    if (r.exitCode === 0) return;
    const again = await readUnitStatus(unit.name, signal);
    if (!isSameRun(again, unit) || UNIT_ENDED_STATES.has(again.ActiveState)) return;
    if (Number(again.MainPID) > 0) {
      throw failure(`systemctl kill --kill-whom=main --signal=SIGTERM -- ${unit.name} exited ${r.exitCode}: ${r.stderr.trim() || 'no message'}`);
    }
  }
  await systemctlOrThrow(['kill', '--kill-whom=all', '--signal=SIGTERM', '--', unit.name], signal);
}

/**
 * Waits until the unit's main process is gone and nothing of the unit runs,
 * or the unit itself has ended (a main process that exits non-zero fails
 * the unit, and systemd then ends its cgroup); false at `deadlineMs`.
 * When the cgroup cannot be read, a gone main process is taken as enough:
 * the stop that follows ends whatever is left (at once under KillMode=mixed).
 */
async function waitDrained(unit: EngineUnit, deadlineMs: number, signal?: AbortSignal): Promise<boolean> {
  for (;;) {
    const s = await readUnitStatus(unit.name, signal);
    if (!isSameRun(s, unit) || UNIT_ENDED_STATES.has(s.ActiveState)) return true;
    if (Number(s.MainPID) <= 0) {
      const left = await unitCgroupProcs(s.ControlGroup);
      if (left === undefined || left.length === 0) return true;
    }
    if (Date.now() >= deadlineMs) return false;
    await sleep(Math.min(UNIT_POLL_MS * 2.5, Math.max(1, deadlineMs - Date.now())), undefined, { signal });
  }
}

/**
 * Unloads an ended unit (a failed one stays loaded, with its exit status,
 * until reset): once its status has been read and reported, it would only
 * make the next start of the shard id fail with "unit already exists".
 */
export async function forgetUnit(unit: EngineUnit, signal?: AbortSignal): Promise<void> {
  const status = await readUnitStatus(unit.name, signal);
  if (!isSameRun(status, unit) || !UNIT_ENDED_STATES.has(status.ActiveState)) return;
  // Exits 1 when the unit is not failed (already unloaded): nothing to do then.
  await runSystemctl(['reset-failed', '--', unit.name], { signal });
}

/**
 * What a dead engine's unit may still hold, ended: nothing when the unit
 * failed (systemd stopped its whole cgroup on the way), its leftovers when
 * the engine exited cleanly (RemainAfterExit keeps the unit, and any worker
 * in it, up). One `systemctl show` on the way to FAILED; unloading a failed
 * unit is left to the background, since a death is reported as fast as a
 * direct child's and clearEndedUnit unloads it before a relaunch anyway.
 */
export async function endUnitLeftovers(unit: EngineUnit, opts: { graceMs: number; signal?: AbortSignal }): Promise<void> {
  const status = await readUnitStatus(unit.name, opts.signal);
  if (!isSameRun(status, unit)) return;
  if (UNIT_ENDED_STATES.has(status.ActiveState)) {
    void runSystemctl(['reset-failed', '--', unit.name]).catch(() => {});
    return;
  }
  await stopEngineUnit(unit, opts);
}

/**
 * Stops the unit a launch of this agent just created and then could not
 * take (no invocation id or main process read, the engine gone before it
 * was identified): left running it would hold its GPUs with no state file,
 * invisible to the agent (finding 15 of the security review). With its
 * invocation id known only that run is stopped; without it the name is
 * still the one systemd-run created a moment ago. systemd's own stop
 * (KillMode=mixed: SIGTERM to the main process, TimeoutStopSec, SIGKILL to
 * the cgroup) bounds the wait; the unit is then unloaded so the shard id
 * can be started again.
 */
export async function stopFailedLaunch(name: string, invocationId: string | undefined): Promise<void> {
  if (invocationId !== undefined && !isSameRun(await readUnitStatus(name), { name, invocationId })) return;
  await systemctlOrThrow(['stop', '--', name]);
  // Exits 1 when the unit is not failed (already unloaded): nothing to do then.
  await runSystemctl(['reset-failed', '--', name]);
}

async function waitEnded(unit: EngineUnit, deadlineMs: number, signal?: AbortSignal): Promise<boolean> {
  for (;;) {
    const s = await readUnitStatus(unit.name, signal);
    if (!isSameRun(s, unit) || UNIT_ENDED_STATES.has(s.ActiveState)) return true;
    if (Date.now() >= deadlineMs) return false;
    await sleep(Math.min(UNIT_POLL_MS * 2.5, Math.max(1, deadlineMs - Date.now())), undefined, { signal });
  }
}

async function systemctlOrThrow(argv: string[], signal?: AbortSignal): Promise<void> {
  const r = await runSystemctl(argv, { signal });
  if (r.exitCode !== 0) throw failure(`systemctl ${argv.join(' ')} exited ${r.exitCode}: ${r.stderr.trim() || 'no message'}`);
}

/**
 * Before a launch under a shard's unit name: a unit of that name left by an
 * earlier run whose engine has ended (failed, or exited with its leftovers)
 * is stopped and unloaded, since systemd-run refuses a name that is loaded.
 * One whose main process still runs is refused: that is an engine, and
 * nothing says it may be killed.
 */
export async function clearEndedUnit(name: string, signal?: AbortSignal): Promise<void> {
  const status = await readUnitStatus(name, signal);
  if (status.LoadState !== 'loaded') return;
  const mainPid = Number(status.MainPID);
  if (!UNIT_ENDED_STATES.has(status.ActiveState) && mainPid > 0) {
    throw failure(
      `systemd unit ${name} is ${status.ActiveState} with main pid ${mainPid}, but no state file of this agent describes it; stop it (systemctl stop ${name}) if nothing should run there, then start the shard again`,
    );
  }
  await stopEngineUnit({ name, invocationId: status.InvocationID }, { graceMs: 0, signal });
}
