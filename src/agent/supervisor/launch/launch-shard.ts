import type { StartShard } from '../../../gen/llmgw/v1/agent_pb.js';
import { errorMessage, failure, usageError } from '../../../lib/errors.js';
import { join } from 'node:path';
import { DEFAULT_KEEP_PREVIOUS_RUNS, keepPreviousRun } from '../../../lib/files/keep-previous-run.js';
import { LOG_DIR_MODE, ensureDirectory, prepareLogFile } from '../../../lib/files/log-file-modes.js';
import { type EngineRecord, readStateFile, removeStateFile, stateFileOf, writeStateFile } from '../../../lib/files/state-file.js';
import type { CheckedStartShard, ShardId } from '../../../lib/shard-id.js';
import { checkIdentity } from '../../../lib/process/process-identity.js';
import { type EngineUids, agentUids, findProcessesLoggingTo } from '../../../lib/process/process-table.js';
import { previousRunsDir, shardLogDir, shardLogPath, shardStateDir, shardStatePath } from '../../../lib/shard-layout.js';
import type { LaunchPlan } from '../../engines/launch-plan.js';
import type { EngineWatch } from '../../../lib/engine-watch.js';
import { checkLaunchPlan } from './check-launch-plan.js';
import { chooseLauncher } from './choose-launcher.js';
import { type EngineFence, endEngine } from './end-engine.js';
import { engineEnvFor, launchEngine } from './launch-engine.js';
import type { Logger } from '../../../lib/logger.js';
import type { SupervisorConfig } from '../../config/agent-config.js';
import type { LauncherChoice } from './choose-launcher.js';
import { EngineProcess } from './engine-process.js';
import type { RunnerEngine } from './runner-engine.js';

/** What a launch needs of the supervisor: its config, its log, and the launcher new engines get (config.launcher decided when absent). */
export interface LaunchContext {
  config: SupervisorConfig;
  log: Logger;
  launcher?: () => Promise<LauncherChoice>;
}

/** The earlier engine under the same id (its runner), ended before the new one starts. */
export interface PreviousEngine {
  detach(why: 'replaced'): void;
  fence(): EngineFence;
}

/** What an engine makes of a shard spec: the command, and how its rank is judged. */
export interface ShardLaunch {
  plan: LaunchPlan;
  /** Whether this rank opens the HTTP API (readiness by probe) or is a worker (readiness by staying alive). */
  servesHttp: boolean;
  /** How the rank is probed and what of its metrics is read (Engine.watch); without it, plainWatch. */
  watch?: EngineWatch;
  /** What an operator should know of how this start runs (ShardSnapshot.note): that it runs online, and why. */
  note?: string;
  /** The content digest of the model the start reads from the node's store (issue 51); none when it does not. */
  modelDigest?: string;
}

/** The unit properties that place a rank (LaunchPlan.placement): CPUAffinity=, and NUMAPolicy=bind with NUMAMask= on one NUMA node. */
export function placementProperties(p: LaunchPlan['placement']): Record<string, string> {
  if (!p) return {};
  return {
    ...(p.cpus !== undefined ? { CPUAffinity: p.cpus } : {}),
    ...(p.numaNode !== undefined ? { NUMAPolicy: 'bind', NUMAMask: String(p.numaNode) } : {}),
  };
}

/**
 * The watch of a launch that names none (a test's plan, a bench's): an API
 * rank answers /health and lists its model on the shard's port, a worker
 * stays alive; no series are read, so there is no drain count and no stall
 * detection.
 */
export function plainWatch(spec: StartShard, servesHttp: boolean): EngineWatch {
  return {
    healthPort: servesHttp ? spec.httpPort : 0,
    healthPath: '/health',
    probeTimeoutMs: 0,
    readiness: servesHttp ? 'model-listed' : 'health',
    runningGauges: [],
    inFlightGauges: [],
    progressCounters: [],
    apiKey: '',
    adminApiKey: '',
  };
}

/**
 * Where a systemd-run engine's environment is kept for its unit: beside its
 * state file, in the root-only (0700) state directory. Not a state file
 * name (.json), so recovery never reads it as one.
 */
export const shardEnvFilePath = (stateDir: string, shardId: string): string => join(shardStateDir(stateDir), `${shardId}.env`);

/** Who may write and read a shard's files: what the supervisor was configured with. */
export interface ShardFileOwnership {
  /** The uids a process must run as to count as a writer of a shard's log. */
  engineUids: EngineUids;
  /** Group given the log directory and logs (admin.group); unchanged when undefined. */
  logGid?: number;
}

/**
 * Launches one shard's engine and records it on disk, returning it for
 * the supervisor to build its runner on (Supervisor.launch). `previous` is
 * the runner of an earlier engine under the same id, whose group is ended
 * first.
 */
export async function launchShard(
  ctx: LaunchContext,
  spec: CheckedStartShard,
  launch: ShardLaunch,
  previous: PreviousEngine | undefined,
  signal: AbortSignal,
  files: ShardFileOwnership = { engineUids: agentUids() },
): Promise<RunnerEngine> {
  const id = spec.shardId;
  const c = ctx.config;
  // First: which environment the engine starts from depends on the launcher.
  const { launcher } = await (ctx.launcher?.() ?? chooseLauncher(c.launcher));
  // The engine's whole environment, built once: checked, then launched as is.
  const plan = { ...launch.plan, env: engineEnvFor(launcher, launch.plan) };
  if (plan.argv.length === 0 || plan.argv[0] === '') throw usageError(`shard ${id}: the launch plan has no command`);
  checkLaunchPlan(launch.plan, plan.env);
  ensureDirs(c.stateDir, c.logDir, files.logGid);
  const statePath = shardStatePath(c.stateDir, id);
  const logPath = shardLogPath(c.logDir, id);
  const watch = launch.watch ?? plainWatch(spec, launch.servesHttp);

  if (previous) {
    // A relaunch. The old engine may have left processes behind (a worker
    // of a leader that crashed, or an engine that timed out while loading):
    // they hold the GPUs the new one is about to ask for.
    previous.detach('replaced');
    await endEngine(previous.fence(), { graceMs: c.stopGraceMs, signal });
  } else {
    await refuseUnsupervisedEngine(id, statePath, logPath, files.engineUids);
  }
  // Nothing of the old run writes its log any more: keep it, so `ctl logs --previous` can show how it ended.
  await keepPreviousRun(c.logDir, id, c.keepPreviousRuns ?? DEFAULT_KEEP_PREVIOUS_RUNS).catch((err: unknown) =>
    ctx.log.warn({ shard: id, err: errorMessage(err) }, 'could not keep the previous run\'s log; the new run appends to it'),
  );
  prepareLogFile(logPath, files.logGid);

  const launched = await launchEngine(launcher, id, plan, logPath, signal, shardEnvFilePath(c.stateDir, id), {
    // A multi-node rank on its GPUs' CPUs and NUMA node; the operator's unit_properties win.
    properties: { ...placementProperties(plan.placement), ...c.unitProperties },
    stopGraceMs: c.stopGraceMs,
  });
  const record: EngineRecord = {
    shardId: id,
    replicaId: spec.replicaId,
    spec,
    servesHttp: launch.servesHttp,
    watch,
    pid: launched.pid,
    pgid: launched.pgid,
    identity: launched.identity,
    launcher,
    ...(launched.unit ? { unit: launched.unit } : {}),
    logPath,
    createdAtMs: Date.now(),
    // Kept for an adopting agent: its known-answer check needs what the model's content is (issue 51).
    ...(launch.modelDigest ? { modelDigest: launch.modelDigest } : {}),
  };
  try {
    await writeStateFile(statePath, stateFileOf(record));
  } catch (err) {
    // Without its state file this engine could not be found after an agent
    // restart, and would hold its GPUs with nothing able to describe it.
    await endEngine(new EngineProcess({ pid: launched.pid, pgid: launched.pgid, identity: launched.identity, child: launched.child }, launched.unit).fence(), { graceMs: 0 });
    throw failure(`cannot write the state file ${statePath}: ${errorMessage(err)}; the engine was stopped`, { cause: err });
  }
  return { record, child: launched.child, adopted: false, statePath, ...(launch.note ? { note: launch.note } : {}), ...(launch.modelDigest ? { modelDigest: launch.modelDigest } : {}) };
}

/**
 * No runner here, but maybe a state file from a previous agent whose engine
 * still runs: starting a second engine on the same GPUs would fail after
 * minutes of loading, or worse, succeed beside it.
 */
async function refuseUnsupervisedEngine(id: ShardId, statePath: string, logPath: string, engineUids: EngineUids): Promise<void> {
  const read = await readStateFile(statePath, id);
  if (read.ok && checkIdentity(read.file.pid, read.file.identity, read.file.pgid).alive) {
    throw failure(
      `shard ${id} is already running (pid ${read.file.pid}) from a previous agent; adopt it (findOrphans/adopt) instead of starting it again`,
    );
  }
  const holders = findProcessesLoggingTo(logPath, engineUids);
  if (holders.length > 0) {
    throw failure(
      `processes ${holders.map((p) => p.pid).join(', ')} still write shard ${id}'s log but nothing identifies them; kill them (killOrphan) before starting it again`,
    );
  }
  await removeStateFile(statePath);
}

function ensureDirs(stateDir: string, logDir: string, logGid: number | undefined): void {
  // State files name pids this agent will signal: nobody else may write here.
  ensureDirectory(shardStateDir(stateDir), 0o700);
  ensureDirectory(shardLogDir(logDir), LOG_DIR_MODE, logGid);
  // Kept runs are engine output too (keepPreviousRun): the same mode and group.
  ensureDirectory(previousRunsDir(logDir), LOG_DIR_MODE, logGid);
}
