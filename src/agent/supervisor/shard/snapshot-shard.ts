import { ShardState } from '../../../gen/llmgw/v1/agent_pb.js';
import type { EngineRecord } from '../../../lib/files/state-file.js';
import type { RunnerEngine } from '../launch/runner-engine.js';
import type { EngineLoad } from '../probes/load-meter.js';
import type { ShardLife } from './shard-machine.js';
import type { ShardSnapshot } from './shard-snapshot.js';

/**
 * A runner's shard as a copy (ShardRunner.snapshot): its record, its life,
 * how it was launched or adopted, its unit's name, the load last read and
 * the engine version found, and what is to be said of a sleep the engine did
 * not confirm (ShardEngineFacts.sleepNote). Positional, not an options
 * object: it runs for every status, ctl and scrape, and allocates only the
 * snapshot.
 */
export function snapshotShard(r: EngineRecord, l: ShardLife, launched: RunnerEngine, unit: string, load: EngineLoad, engineVersion: string | undefined, sleepNote = ''): ShardSnapshot {
  // One literal, not a spread of parts: under --no-opt (bin/run.js) each
  // spread was a temporary object and the result a dictionary, about 9 KB
  // a snapshot, and snapshots are taken for every status, ctl and scrape
  // (bench 5b: they were a quarter of an idle agent's allocation).
  const s: ShardSnapshot = {
    shardId: r.shardId,
    replicaId: r.replicaId,
    spec: r.spec,
    pid: r.pid,
    servesHttp: r.servesHttp,
    startedAtMs: r.createdAtMs,
    logPath: r.logPath,
    state: l.state,
    error: l.error,
    exitCode: l.exitCode,
    signal: l.signal,
    lastOutput: [...l.lastOutput],
    running: !l.dead,
    drainRequested: l.drain,
    sleepLevel: l.sleep?.level ?? 0,
    adopted: launched.adopted,
    launcher: r.launcher,
    unit,
    note: sleepNote === '' ? (launched.note ?? '') : launched.note ? `${launched.note}; ${sleepNote}` : sleepNote,
    load: { ...load },
    engineVersion,
  };
  // Absent, not undefined, when they do not hold: callers test `'x' in s` and compare snapshots whole.
  if (l.endedAtMs !== undefined) s.endedAtMs = l.endedAtMs;
  if (launched.modelDigest) s.modelDigest = launched.modelDigest;
  if (l.health.gang) s.gangFault = { ...l.health.gang };
  if (l.state === ShardState.UNHEALTHY && l.health.verdict.cause === 'stalled') s.stalled = true;
  return s;
}
