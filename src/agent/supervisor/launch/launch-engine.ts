import { setTimeout as setTimeoutPromise } from 'node:timers/promises';
import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, constants, openSync } from 'node:fs';
import { once } from 'node:events';
import { rm } from 'node:fs/promises';
import type { Launcher } from '../../config/agent-config.js';
import { errorMessage, failure, LlmgwError } from '../../../lib/errors.js';
import type { LaunchPlan } from '../../engines/launch-plan.js';
import { LOG_FILE_MODE } from '../../../lib/files/log-file-modes.js';
import { readProcStat } from '../../../lib/process/proc-stat.js';
import { type ProcessIdentity, readBootId } from '../../../lib/process/process-identity.js';
import { writeFileAtomic } from '../../../lib/write-file-atomic.js';
import { systemdUnitName } from '../../../lib/systemd/unit-name.js';
import { runSystemctl } from '../../../lib/systemd/run-systemctl.js';
import { type EngineUnit, readInvocation } from './engine-unit.js';
import { clearEndedUnit, stopFailedLaunch } from './stop-engine-unit.js';
import { type SystemdRunOptions, buildSystemdRunArgv, environmentFileText } from './systemd-run-argv.js';

/** Limit for systemd-run and systemctl, which answer in milliseconds when systemd is healthy. */
export const SYSTEMD_TIMEOUT_MS = 30_000;

export interface LaunchedEngine {
  pid: number;
  pgid: number;
  identity: ProcessIdentity;
  /** Present when the engine is our own child, whose exit status we will be told. */
  child?: ChildProcess;
  /** Present when the engine runs in its own systemd unit (systemd-run). */
  unit?: EngineUnit;
}

/**
 * Variables of the agent's own that an engine must not inherit: systemd's
 * notify and watchdog sockets (an engine speaking sd_notify would report for
 * the agent's unit), socket activation, which belongs to the agent alone, and
 * the agent's Node runtime flags (the unit tunes its heap for the agent).
 */
const AGENT_ONLY_ENV = /^(NOTIFY_SOCKET|WATCHDOG_USEC|WATCHDOG_PID|LISTEN_FDS|LISTEN_PID|LISTEN_FDNAMES|NODE_OPTIONS|LLMGW_.*)$/;

/**
 * The agent's environment (engines need its PATH, LD_LIBRARY_PATH, HF_HOME,
 * proxies…) without the agent-only variables, with the plan's on top.
 */
export function engineEnv(plan: LaunchPlan, base: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(base)) {
    if (value !== undefined && !AGENT_ONLY_ENV.test(key)) env[key] = value;
  }
  return Object.assign(env, plan.env);
}

function identityOf(pid: number): { pgid: number; identity: ProcessIdentity } {
  const stat = readProcStat(pid);
  if (!stat) throw failure(`engine process ${pid} vanished before it could be identified; see its log`);
  return { pgid: stat.pgrp, identity: { startTime: stat.startTime, bootId: readBootId() } };
}

/**
 * A unit's main process, once it leads its own group: systemd-run returns
 * once systemd has forked it, and the child calls setsid() on its way to
 * exec (exec_child), so a read before that sees systemd's group, 1. Recorded
 * in the state file, that pgid made the next agent refuse the file (seen
 * under load in test/systemd/engine-units.test.ts). Bounded: a process that
 * never leads its group is no engine this agent launched.
 */
async function unitIdentityOf(pid: number, signal: AbortSignal | undefined): Promise<{ pgid: number; identity: ProcessIdentity }> {
  const deadline = Date.now() + UNIT_SETSID_WAIT_MS;
  for (;;) {
    const read = identityOf(pid);
    if (read.pgid === pid) return read;
    if (Date.now() > deadline) throw failure(`the main process ${pid} of its unit does not lead its own process group (group ${read.pgid}) after ${UNIT_SETSID_WAIT_MS / 1000} s`);
    await setTimeoutPromise(5, undefined, { signal });
  }
}

/** How long a unit's main process may take to lead its own group after systemd-run returns. */
const UNIT_SETSID_WAIT_MS = 10_000;

/**
 * Starts the engine as our child in its own session and process group, stdin
 * closed, stdout and stderr appended to its log by file descriptor. Nothing
 * of the agent sits between the engine and its log, so the agent dying (or
 * being slow) can neither block the engine on a full pipe nor SIGPIPE it.
 */
export async function launchDirect(plan: LaunchPlan, logPath: string): Promise<LaunchedEngine> {
  let fd: number;
  try {
    // O_NOFOLLOW: a symlink planted at the log path would have the engine append to any file.
    // 0640: engine output (prompts, tokens) is for root and the admin group (LOG_FILE_MODE).
    fd = openSync(logPath, constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_NOFOLLOW, LOG_FILE_MODE);
  } catch (err) {
    throw failure(`cannot open the shard log ${logPath}: ${errorMessage(err)}`, { cause: err });
  }
  let child: ChildProcess;
  try {
    // A multi-node rank pinned to its GPUs' CPUs: taskset sets the affinity and execs the engine, same pid (rank-placement.ts).
    const pin = plan.placement?.cpus !== undefined && plan.placement.taskset ? [plan.placement.taskset, '-c', plan.placement.cpus] : [];
    const argv = [...pin, ...plan.argv];
    child = spawn(argv[0] as string, argv.slice(1), {
      detached: true,
      stdio: ['ignore', fd, fd],
      env: plan.env,
      // engines.<name>.user: libuv calls setgroups(0) before setgid/setuid
      // in the child, so root's supplementary groups are dropped too. The
      // log fd was opened above, as root, and is inherited: the engine user
      // needs no write access to the log directory.
      ...(plan.user ? { uid: plan.user.uid, gid: plan.user.gid } : {}),
    });
  } finally {
    // The child has its own copy; ours would only keep the file open.
    closeSync(fd);
  }
  if (child.pid === undefined) {
    // exec failed (ENOENT, EACCES): Node reports it as an 'error' event.
    const [err] = (await once(child, 'error')) as [Error];
    throw failure(`cannot launch engine ${JSON.stringify(plan.argv[0])}: ${errorMessage(err)}`, { cause: err });
  }
  // A later 'error' (a failed kill) must not crash the agent.
  child.on('error', () => {});
  // The agent's event loop must not wait for engines: they outlive it.
  child.unref();
  // Read synchronously, before the event loop can reap a child that exited at once.
  const { pgid, identity } = identityOf(child.pid);
  return { pid: child.pid, pgid, identity, child };
}

/** Names of the agent's own variables a systemd unit gets: what any program needs to run, nothing secret. */
const SYSTEMD_AGENT_ENV = /^(PATH|LANG|LANGUAGE|LC_[A-Z]+|TZ)$/;

/**
 * The environment of an engine launched through systemd-run: the plan's
 * variables plus a small allowlist of the agent's own (PATH, LANG, LC_*,
 * TZ). A unit does not inherit the agent's environment, and must not be
 * handed it either: the agent's own secrets (AWS_SECRET_ACCESS_KEY) went
 * to every engine unit this way (finding 7 of the security review).
 */
export function systemdEngineEnv(plan: LaunchPlan, base: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(base)) {
    if (value !== undefined && SYSTEMD_AGENT_ENV.test(key)) env[key] = value;
  }
  return Object.assign(env, plan.env);
}

/** The engine environment each launcher starts from (engineEnv or systemdEngineEnv), with the plan's on top. */
export function engineEnvFor(launcher: Launcher, plan: LaunchPlan): Record<string, string> {
  const env = launcher === 'systemd-run' ? systemdEngineEnv(plan) : engineEnv(plan);
  // An engine run as its own user must not write caches (HF, torch, pip)
  // under root's HOME, which it cannot, or find root's dotfiles: its HOME is its own.
  if (plan.user) Object.assign(env, { HOME: plan.user.home, USER: plan.user.name, LOGNAME: plan.user.name });
  return env;
}

/**
 * Starts the engine as a transient systemd unit. The engine is then
 * systemd's child, not ours: its death is seen through /proc and its exit
 * status read from the unit (death-watch), and its unit's InvocationID is
 * what identifies it after an agent restart.
 *
 * Its environment goes through `envFile`, written root-only (0600) here,
 * never argv (buildSystemdRunArgv); the file stays for the unit's life and
 * goes with the shard. It is written only once clearEndedUnit has found no
 * engine running under the unit's name, whose file it would replace. Once
 * systemd-run has succeeded the unit exists: any later failure stops it, or
 * it would run on with no state file, holding its GPUs, invisible to the
 * agent (finding 15 of the security review).
 */
/** ": <stderr's last line>", cut short, or nothing. */
function lastLine(stderr: string): string {
  const line = stderr.trim().split('\n').at(-1)?.slice(0, 200);
  return line ? `: ${line}` : '';
}

export async function launchSystemdRun(
  shardId: string,
  plan: LaunchPlan,
  logPath: string,
  signal: AbortSignal | undefined,
  envFile: string,
  opts: SystemdRunOptions = {},
): Promise<LaunchedEngine> {
  const unit = systemdUnitName(shardId);
  try {
    await clearEndedUnit(unit, signal);
  } catch (err) {
    if (err instanceof LlmgwError) throw err;
    throw failure(`cannot launch engine through systemd-run (unit ${unit}): ${errorMessage(err)}`, { cause: err });
  }
  await writeFileAtomic(envFile, environmentFileText(plan.env), 0o600);
  // engines.<name>.user under systemd: the unit's User=/Group=. systemd opens
  // the log and reads envFile as root, before switching, so neither needs to be
  // the user's; it gives the process the account's own groups from the group
  // database (initgroups), never root's (test/systemd/engine-user-unit.test.ts).
  const unitOpts = plan.user ? { ...opts, properties: { ...opts.properties, User: String(plan.user.uid), Group: String(plan.user.gid) } } : opts;
  const [cmd, ...args] = buildSystemdRunArgv(shardId, plan, logPath, envFile, unitOpts);
  // Through runSystemctl, as every systemctl call: its error names the command, never the argv (finding 7).
  const ran = await runSystemctl(args, { cmd: cmd as string, timeoutMs: SYSTEMD_TIMEOUT_MS, signal }).then(
    (r) => (r.exitCode === 0 ? undefined : `systemd-run exited with code ${r.exitCode}${lastLine(r.stderr)}`),
    (err: unknown) => errorMessage(err),
  );
  if (ran !== undefined) {
    // Not stopped: a unit of that name that already ran may be a healthy engine.
    await rm(envFile, { force: true });
    throw failure(`cannot launch engine through systemd-run (unit ${unit}): ${ran}; see journalctl -u ${unit}`);
  }
  let invocationId: string | undefined;
  try {
    const started = await readInvocation(unit, signal);
    invocationId = started.unit.invocationId;
    const pid = started.mainPid;
    if (!Number.isInteger(pid) || pid <= 1) {
      throw failure(`systemd unit ${unit} has no main process (MainPID ${pid}); see journalctl -u ${unit}`);
    }
    return { pid, ...(await unitIdentityOf(pid, signal)), unit: started.unit };
  } catch (err) {
    // Not cancelled with the launch: the unit must go whatever stopped the launch.
    const stopped = await stopFailedLaunch(unit, invocationId).then(
      () => 'the unit was stopped',
      (e: unknown) => `stopping the unit failed too (${errorMessage(e)}): stop it by hand (systemctl stop ${unit})`,
    );
    await rm(envFile, { force: true });
    throw failure(`${errorMessage(err)}; ${stopped}`, { cause: err });
  }
}

/**
 * Starts `plan`, whose env is already the engine's whole environment
 * (engineEnv or systemdEngineEnv, built once by the caller, which also
 * checked it against the kernel's limits): building it again here was a
 * second, drifting copy. `envFile` is where systemd-run's environment goes.
 */
export function launchEngine(
  launcher: Launcher,
  shardId: string,
  plan: LaunchPlan,
  logPath: string,
  signal: AbortSignal | undefined,
  envFile: string,
  unitOptions: SystemdRunOptions = {},
): Promise<LaunchedEngine> {
  return launcher === 'systemd-run' ? launchSystemdRun(shardId, plan, logPath, signal, envFile, unitOptions) : launchDirect(plan, logPath);
}
