import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, constants, openSync } from 'node:fs';
import { once } from 'node:events';
import type { Launcher } from '../config/agent-config.js';
import { errorMessage, failure } from '../../lib/errors.js';
import type { LaunchPlan } from '../engines/launch-plan.js';
import { LOG_FILE_MODE } from '../../lib/files/log-file-modes.js';
import { readProcStat } from '../../lib/process/proc-stat.js';
import { type ProcessIdentity, readBootId } from '../../lib/process/process-identity.js';
import { buildSystemdRunArgv, systemdUnitName } from './systemd-run-argv.js';

/** Limit for systemd-run and systemctl, which answer in milliseconds when systemd is healthy. */
export const SYSTEMD_TIMEOUT_MS = 30_000;

export interface LaunchedEngine {
  pid: number;
  pgid: number;
  identity: ProcessIdentity;
  /** Present when the engine is our own child, whose exit status we will be told. */
  child?: ChildProcess;
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
    child = spawn(plan.argv[0] as string, plan.argv.slice(1), {
      detached: true,
      stdio: ['ignore', fd, fd],
      env: plan.env,
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

/**
 * Starts the engine as a transient systemd unit. The engine is then
 * systemd's child, not ours: its exit is noticed by polling, like an adopted
 * engine's, and its exit status is not known here.
 */
export async function launchSystemdRun(
  shardId: string,
  plan: LaunchPlan,
  logPath: string,
  signal?: AbortSignal,
): Promise<LaunchedEngine> {
  const [cmd, ...args] = buildSystemdRunArgv(shardId, plan, logPath);
  const unit = `${systemdUnitName(shardId)}.service`;
  try {
    // Only the systemd-run launcher needs execa; direct launches do not load it.
    const { execa } = await import('execa');
    await execa(cmd as string, args, { timeout: SYSTEMD_TIMEOUT_MS, cancelSignal: signal, stdin: 'ignore' });
    const { stdout } = await execa('systemctl', ['show', '-p', 'MainPID', '--value', unit], {
      timeout: SYSTEMD_TIMEOUT_MS,
      cancelSignal: signal,
      stdin: 'ignore',
    });
    const pid = Number(String(stdout).trim());
    if (!Number.isInteger(pid) || pid <= 1) {
      throw failure(`systemd unit ${unit} has no main process (MainPID ${JSON.stringify(String(stdout).trim())}); see journalctl -u ${unit}`);
    }
    return { pid, ...identityOf(pid) };
  } catch (err) {
    if (err instanceof Error && err.name === 'LlmgwError') throw err;
    throw failure(`cannot launch engine through systemd-run: ${errorMessage(err)}`, { cause: err });
  }
}

/**
 * Starts `plan`, whose env is already the engine's whole environment
 * (engineEnv, built once by the caller, which also checked it against the
 * kernel's limits): building it again here was a second, drifting copy.
 */
export function launchEngine(
  launcher: Launcher,
  shardId: string,
  plan: LaunchPlan,
  logPath: string,
  signal?: AbortSignal,
): Promise<LaunchedEngine> {
  return launcher === 'systemd-run' ? launchSystemdRun(shardId, plan, logPath, signal) : launchDirect(plan, logPath);
}
