import { create } from '@bufbuild/protobuf';
import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import type { GangFault } from '../supervisor/shard/shard-machine.js';
import {
  type GangBreak,
  GangBreakSchema,
  RunningShardSchema,
  ShardState,
  ShardStatusSchema,
  type RunningShard,
  type ShardStatus,
  type StartShard,
} from '../../gen/llmgw/v1/agent_pb.js';
import { shardFieldProblems, textFieldProblem } from '../../lib/shard-field-problems.js';
import { registerState } from '../supervisor/shard/shard-machine.js';
import type { ShardSnapshot } from '../supervisor/shard/shard-snapshot.js';

/**
 * The ShardStatus message that reports a snapshot, in the state Register
 * says of it (registerState): an adopted shard still settling is told as its
 * state file has it, drained or asleep, until the engine says otherwise
 * (adopted-sleep-steps.ts tells that at once).
 */
export function statusFromSnapshot(nodeId: string, s: ShardSnapshot): ShardStatus {
  return create(ShardStatusSchema, {
    nodeId,
    replicaId: s.replicaId,
    shardId: s.shardId,
    state: registerState(s),
    error: s.error,
    exitCode: s.exitCode ?? 0,
    lastOutput: s.lastOutput,
    pid: s.pid,
    signal: s.signal ?? '',
    adopted: s.adopted,
    ...(s.gangFault ? { gangBreak: gangBreakOf(s.gangFault) } : {}),
    modelDigest: s.modelDigest ?? '',
  });
}

/** ShardStatus.gang_break (and RunningShard's) from what the gang watch saw. */
export function gangBreakOf(f: GangFault): GangBreak {
  return create(GangBreakSchema, { rank: f.rank, nodeId: f.nodeId, shardId: f.shardId, reason: f.reason, since: timestampFromMs(f.sinceMs), stalled: f.stalled, firstToGo: f.firstToGo === true });
}

/** A FAILED report for a start that was refused before anything was launched. */
export function refusedStatus(nodeId: string, spec: Pick<StartShard, 'shardId' | 'replicaId'>, error: string): ShardStatus {
  return create(ShardStatusSchema, {
    nodeId,
    replicaId: spec.replicaId,
    shardId: spec.shardId,
    state: ShardState.FAILED,
    error,
  });
}

/**
 * How a supervised shard is described in Register, so a restarted control
 * plane recovers from it. Its strings are held to StartShard's rule
 * (shardFieldProblems), whatever the spec's source: a field the rule refuses
 * is sent empty. With the rule's bounds one RunningShard is at most 22 KiB,
 * and a node runs no more shards than it has GPUs (each holds one at least,
 * none shared), so Register stays under the 4 MiB a gRPC control plane takes
 * (register-message.test.ts: 64 such shards and a large inventory, 2.1 MB).
 * A 12 MiB pool an older agent had kept made every Register fail for ever
 * (security review 2, N6). A state file's reader drops such fields already;
 * this is what holds for the names it keeps (the model's), and for any other
 * source.
 */
export function runningShardFromSnapshot(s: ShardSnapshot, mgmtAddr: string): RunningShard {
  const spec = s.spec;
  // Without the inventory: the first Register after a restart may go before discovery, with no HCAs known yet.
  const refused = new Set(shardFieldProblems(spec).map((p) => p.field));
  const kept = (field: string, text: string) => (refused.has(field) ? '' : text);
  const served = spec.profile?.servedModelName ?? '';
  // The name the engine serves under: an unfit served name is not replaced by the model, which the engine does not answer to.
  const model = served !== '' ? kept('profile.served_model_name', served) : kept('profile.model', spec.profile?.model ?? '');
  const engine = spec.profile?.engine ?? '';
  const leaderAddr = kept('leader_addr', spec.leaderAddr);
  return create(RunningShardSchema, {
    replicaId: textFieldProblem('replica_id', s.replicaId) ? '' : s.replicaId,
    shardId: s.shardId,
    rank: spec.rank,
    nnodes: spec.nnodes,
    gpuIndices: spec.gpuIndices,
    hcas: [...refused].some((f) => f.startsWith('hcas')) ? [] : spec.hcas,
    httpPort: spec.httpPort,
    state: s.state,
    model,
    profile: kept('profile.name', spec.profile?.name ?? ''),
    pool: kept('pool', spec.pool),
    fabric: kept('fabric', spec.fabric),
    leaderAddr: leaderAddr || (spec.rank === 0 ? mgmtAddr : ''),
    leaderPort: spec.leaderPort,
    pid: s.pid,
    engine: textFieldProblem('profile.engine', engine) ? '' : engine,
    ...(s.gangFault ? { gangBreak: gangBreakOf(s.gangFault) } : {}),
    modelDigest: s.modelDigest ?? '',
  });
}
