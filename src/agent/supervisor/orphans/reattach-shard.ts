import { errorMessage, failure } from '../../../lib/errors.js';
import { readFileSync, rmSync } from 'node:fs';
import { ShardState } from '../../../gen/llmgw/v1/agent_pb.js';
import { type FailureRecord, writeFailureRecord } from '../../../lib/files/failure-record.js';
import { shardEnvFilePath } from '../launch/launch-shard.js';
import { type EngineRecord, readStateFileSync, type ShardStateFile } from '../../../lib/files/state-file.js';
import type { Orphan } from '../../../lib/process/orphan.js';
import { checkIdentity } from '../../../lib/process/process-identity.js';
import { shardFailurePath, shardLogPath, shardStatePath } from '../../../lib/shard-layout.js';
import { newShardLife } from '../shard/shard-machine.js';
import { ShardRunner } from '../shard/shard-runner.js';
import type { ShardRunnerContext } from '../shard/shard-runner-context.js';
import { legacyWatch, withLegacySleepApi } from './legacy-watch.js';

/**
 * A runner for an engine a previous agent launched and that still runs
 * (Nomad's reattach): built from its state file, not yet begun. The caller
 * then begins it and settles it exactly like a fresh start: leaving it in
 * STARTING once made the control plane time out and replace a healthy
 * engine after every agent restart.
 *
 * The state file is read again, synchronously: the orphan was judged a
 * moment ago, and the engine may have died (and its pid been reused) since.
 */
export function reattachShard(ctx: ShardRunnerContext, o: Orphan, previous: ShardRunner | undefined): ShardRunner {
  const { stateDir, logDir } = ctx.config;
  const statePath = shardStatePath(stateDir, o.shardId);
  const f = readStateFileSync(statePath, o.shardId);
  if (!f.ok) throw failure(`cannot adopt shard ${o.shardId}: ${f.reason}`);
  // With the group: adopting a pid that does not lead its recorded group would have
  // every later stop signal whatever group that number names.
  const check = checkIdentity(f.file.pid, f.file.identity, f.file.pgid);
  if (!check.alive) throw failure(`cannot adopt shard ${o.shardId}: ${check.reason}`);
  if (f.refused.length > 0) {
    // Once per adoption, at the read that takes the engine over; the scan's
    // read (findOrphans) saw the same fields and says nothing of them.
    ctx.log.warn(
      { shard: o.shardId, file: statePath, fields: f.refused.map((p) => p.field).join(', '), why: f.refused.map((p) => p.message).join('; ') },
      'state file of an older agent holds fields StartShard now refuses; the engine is adopted, and Register does not carry them',
    );
  }
  // The model's content as the launching agent verified it: the adopted engine's known answer is checked against it (issue 51).
  const modelDigest = f.file.modelDigest;
  return new ShardRunner(ctx, { record: recordOf(f.file, o, logDir), adopted: true, note: o.unitNote, statePath, ...(modelDigest ? { modelDigest } : {}) }, previous?.currentState);
}

/** The state file as the record, but for what this agent derives or no longer trusts. */
function recordOf(file: ShardStateFile, o: Orphan, logDir: string): EngineRecord {
  const { schemaVersion: _v, inFlightMetric: _m, generationTokensMetric: _g, ...recorded } = file;
  return {
    ...recorded,
    watch: withLegacySleepApi(file.watch ?? legacyWatch(file), file),
    // Its run was checked against systemd's InvocationID when it was judged (judgeUnitOrphan). A unit
    // systemd no longer describes as recorded is not the engine's fence: watched and stopped by pid.
    unit: o.unitNote === undefined ? file.unit : undefined,
    logPath: shardLogPath(logDir, o.shardId),
  };
}

/**
 * A shard whose engine a previous agent left ended (an orphan judged dead),
 * kept FAILED as it was so that `ctl status --all` still shows it after the
 * restart, as a crash before one was forgotten (walkthrough 3). Its error is
 * its failure record's when the previous agent wrote one for this run (the
 * same pid), else `why`. No runner of it watches anything: its engine is gone.
 *
 * Its state file stays (Supervisor.remove deletes it when the shard is
 * forgotten), so the next restart keeps it again, and so on until
 * supervisor.terminal_retention from its end (walkthrough 4, O3: the file
 * went at the first restart, and the second forgot every crash). The end is
 * its failure record's `at`; an engine that ended while no agent ran has
 * none, so one is written now, and later restarts read its time from it.
 * Its systemd-run environment file (secrets) goes at once.
 */
export function endedShard(ctx: ShardRunnerContext, o: Orphan, why: string): { runner: ShardRunner; endedAtMs: number } {
  const statePath = shardStatePath(ctx.config.stateDir, o.shardId);
  const f = readStateFileSync(statePath, o.shardId);
  if (!f.ok) throw failure(`cannot keep shard ${o.shardId}: ${f.reason}`);
  const failurePath = shardFailurePath(ctx.config.logDir, o.shardId);
  let failed: FailureRecord | undefined;
  try {
    failed = JSON.parse(readFileSync(failurePath, 'utf8')) as FailureRecord;
  } catch {
    failed = undefined;
  }
  const own = failed?.shardId === o.shardId && failed.pid === f.file.pid ? failed : undefined;
  const life = newShardLife({ state: ShardState.FAILED });
  const ended = own
    ? { error: own.error, exitCode: own.exitCode, signal: own.signal as NodeJS.Signals | null, lastOutput: own.lastOutput }
    : { error: why, exitCode: o.exitCode ?? null, signal: (o.exitSignal || null) as NodeJS.Signals | null, lastOutput: [] };
  const recordedAt = own ? Date.parse(own.at) : Number.NaN;
  const endedAtMs = Number.isFinite(recordedAt) ? recordedAt : Date.now();
  if (!own) {
    const record: FailureRecord = { shardId: o.shardId, replicaId: o.replicaId, pid: f.file.pid, ...ended, at: new Date(endedAtMs).toISOString(), startedAt: new Date(f.file.createdAtMs).toISOString(), lastOutput: [] };
    writeFailureRecord(failurePath, record).catch((err: unknown) => ctx.log.warn({ shard: o.shardId, err: errorMessage(err) }, 'cannot write the failure record of an engine that ended while the agent was down; the next restart keeps it from now'));
  }
  rmSync(shardEnvFilePath(ctx.config.stateDir, o.shardId), { force: true });
  const runner = new ShardRunner(ctx, { record: recordOf(f.file, o, ctx.config.logDir), adopted: true, note: o.unitNote, statePath }, { ...life, ...ended, dead: true });
  return { runner, endedAtMs };
}
